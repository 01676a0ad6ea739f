"""Keeping the values of ``PGJOBS["REDACT_KEYS"]`` arguments out of what the worker stores and logs.

The admin shows a job's arguments with those values replaced by ``********``. A handler's error
can still quote them (``PermissionError(f"refused {token}")``), and errors are stored, shown in the
admin and logged; so before the worker records an error it replaces every secret value of the
job's arguments in the error's message and traceback.

Secret values are those under a redacted key (compared case-insensitively) at any depth of the
arguments, including positional arguments whose parameter has a redacted name. Values shorter
than ``MIN_SECRET_CHARS`` are left alone: replacing them would blank out ordinary words.
The job row itself keeps the real arguments, so a requeued job still runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from . import registry
from .conf import get_config
from .payload import MAX_NESTING

REDACTED = "********"
MIN_SECRET_CHARS = 4


def redacted_keys() -> frozenset[str]:
    return frozenset(key.lower() for key in get_config().REDACT_KEYS)


def secret_values(
    func: Callable[..., Any] | None, args: Any, kwargs: Any, keys: frozenset[str]
) -> set[str]:
    """The text of every argument value under a redacted key (or parameter name)."""
    found: set[str] = set()
    if not keys:
        return found
    if func is not None and isinstance(args, list) and isinstance(kwargs, dict):
        try:
            _collect(inspect.signature(func).bind_partial(*args, **kwargs).arguments, keys, found)
        except (TypeError, ValueError):
            pass
    _collect(args, keys, found)
    _collect(kwargs, keys, found)
    return found


def _collect(
    value: Any, keys: frozenset[str], found: set[str], secret: bool = False, depth: int = 0
) -> None:
    if depth > MAX_NESTING:  # deeper than enqueue() accepts: a hand-written row; stop here
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _collect(item, keys, found, secret or str(key).lower() in keys, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, keys, found, secret, depth + 1)
    elif secret and value is not None and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_SECRET_CHARS:
            found.add(text)


def hide(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: no partial leftovers
        text = text.replace(secret, REDACTED)
    return text


def hide_secrets(entry: dict[str, Any], job: Any) -> dict[str, Any]:
    """``entry`` (one error of ``job``, see ``operations.error_entry``) with the secret values of
    the job's arguments replaced in its message and traceback."""
    keys = redacted_keys()
    if not keys:
        return entry
    try:
        func = registry.get(job.name).func
    except registry.UnknownJobError:
        func = None
    secrets = secret_values(func, job.args, job.kwargs, keys)
    if not secrets:
        return entry
    return {
        **entry,
        "message": hide(entry["message"], secrets),
        "traceback": hide(entry["traceback"], secrets),
    }
