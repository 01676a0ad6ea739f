"""``redaction``: one walk decides which argument values are secret, for what the admin shows
and for what the worker hides in stored errors."""

from __future__ import annotations

from django.test import override_settings

from django_pgjobs.redaction import REDACTED, hide, redact_call, redacted_keys


def handler(user_id, token, *api_keys, retries=3, options=None, **credentials):
    raise AssertionError("never called")


def test_the_admin_view_and_the_error_text_hide_the_same_values():
    args = [7, "tok-positional", "key-one", "key-two"]
    kwargs = {"retries": 1, "options": {"Token": "tok-nested", "depth": [{"token": "tok-deep"}]}}
    kwargs["site_password"] = "pw-extra"
    keys = frozenset({"token", "api_keys", "credentials"})
    shown_args, shown_kwargs, secrets = redact_call(handler, args, kwargs, keys)
    assert shown_args == [7, REDACTED, REDACTED, REDACTED]
    assert shown_kwargs == {
        "retries": 1,
        "options": {"Token": REDACTED, "depth": [{"token": REDACTED}]},
        "site_password": REDACTED,  # went to **credentials
    }
    assert secrets == {"tok-positional", "key-one", "key-two", "tok-nested", "tok-deep", "pw-extra"}
    assert args[1] == "tok-positional" and kwargs["options"]["Token"] == "tok-nested"  # copies
    error = "refused tok-positional with key-two and pw-extra"
    assert hide(error, secrets) == f"refused {REDACTED} with {REDACTED} and {REDACTED}"


def test_without_keys_or_function_nothing_or_only_keys_are_hidden():
    assert redact_call(handler, [1, "tok-x"], {}, frozenset()) == ([1, "tok-x"], {}, set())
    shown_args, shown_kwargs, secrets = redact_call(
        None, [1, "tok-x"], {"token": "abc"}, frozenset({"token"})
    )
    assert shown_args == [1, "tok-x"] and shown_kwargs == {"token": REDACTED}
    assert secrets == set()  # shorter than MIN_SECRET_CHARS: hidden in the admin, not in text


def test_redacted_keys_compare_case_insensitively():
    with override_settings(PGJOBS={"REDACT_KEYS": ["Token", "PASSWORD"]}):
        assert redacted_keys() == {"token", "password"}
