"""Keeping the values of ``PGJOBS["REDACT_KEYS"]`` arguments out of what the worker stores and logs.

The admin shows a job's arguments with those values replaced by ``********`` (``redact_call``). A handler's error
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
import json
from collections.abc import Callable, Iterable
from typing import Any

from . import registry
from .conf import get_config
from .payload import MAX_NESTING

REDACTED = "********"
MIN_SECRET_CHARS = 4


def redacted_keys() -> frozenset[str]:
    return frozenset(key.lower() for key in get_config().REDACT_KEYS)


def redact_call(
    func: Callable[..., Any] | None, args: Any, kwargs: Any, keys: frozenset[str]
) -> tuple[Any, Any, set[str]]:
    """``(args, kwargs, secrets)``: copies of the arguments with every value under a redacted
    key (or passed to a parameter with a redacted name, ``*args`` included) shown as
    ``REDACTED``, and the text of those values (for ``hide``)."""
    secrets: set[str] = set()
    if not keys:
        return args, kwargs, secrets
    shown_args = _redact(args, keys, secrets)
    shown_kwargs = _redact(kwargs, keys, secrets)
    positions, keywords = _secret_parameters(func, args, kwargs, keys)
    for index in positions:
        shown_args[index] = _secret(args[index], secrets)
    for key in keywords:
        shown_kwargs[key] = _secret(kwargs[key], secrets)
    return shown_args, shown_kwargs, secrets


def _secret_parameters(
    func: Callable[..., Any] | None, args: Any, kwargs: Any, keys: frozenset[str]
) -> tuple[list[int], list[str]]:
    """The positional arguments (indexes) and keyword arguments (names) that ``func`` receives
    in a parameter with a redacted name (``*args`` and ``**kwargs`` included)."""
    if func is None or not isinstance(args, list) or not isinstance(kwargs, dict):
        return [], []
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return [], []
    positions: list[int] = []
    keywords: list[str] = []
    index = 0
    for parameter in parameters:
        secret = parameter.name.lower() in keys
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            if secret and index < len(args):
                positions.append(index)
            index += 1
        elif parameter.kind == parameter.VAR_POSITIONAL:
            if secret:
                positions.extend(range(index, len(args)))
            index = len(args)
        elif parameter.kind == parameter.VAR_KEYWORD and secret:
            named = {p.name for p in parameters}
            keywords.extend(key for key in kwargs if key not in named)
    return positions, keywords


def redact_value(value: Any) -> Any:
    """A copy of a JSON value (a job's kept result) with every value under a redacted key shown
    as ``REDACTED``."""
    keys = redacted_keys()
    return _redact(value, keys, set()) if keys else value


def _redact(value: Any, keys: frozenset[str], secrets: set[str], depth: int = 0) -> Any:
    if depth > MAX_NESTING:  # deeper than enqueue() accepts: a hand-written row; stop here
        return value
    if isinstance(value, dict):
        return {
            key: _secret(item, secrets, depth + 1)
            if str(key).lower() in keys
            else _redact(item, keys, secrets, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, keys, secrets, depth + 1) for item in value]
    return value


def _secret(value: Any, secrets: set[str], depth: int = 0) -> str:
    """``REDACTED``, after adding the text of every leaf of ``value`` to ``secrets``."""
    if depth > MAX_NESTING:
        return REDACTED
    if isinstance(value, dict):
        for item in value.values():
            _secret(item, secrets, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _secret(item, secrets, depth + 1)
    elif value is not None and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_SECRET_CHARS:
            secrets.add(text)
    return REDACTED


def redact_job_call(name: str, args: Any, kwargs: Any) -> tuple[Any, Any, set[str]]:
    """``redact_call`` for the registered job ``name`` (by key only when it is unknown)."""
    try:
        func = registry.get(name).func
    except registry.UnknownJobError:
        func = None
    return redact_call(func, args, kwargs, redacted_keys())


def may_redact(stored_text: str, name: str | None = None) -> bool:
    """Whether redaction could change what ``stored_text`` shows: PostgreSQL's text of a JSON
    value (``value::text``), or any prefix of it. With ``name``, the value is an argument of
    that job.

    True when a redacted key appears in the text as a quoted string (compared as ``_redact``
    compares keys: lowered, in PostgreSQL's escaping, which is JSON's) or when the job's
    function has a parameter with a redacted name (its arguments are redacted by position).
    False means the text can be shown as it is. A secret value follows its key, so a prefix
    that holds part of a secret holds the key too: the admin can show the head of a long value
    without reading the rest.
    """
    keys = redacted_keys()
    if not keys:
        return False
    if name is not None and _takes_secret_parameter(name, keys):
        return True
    folded = stored_text.lower()
    return any(json.dumps(key, ensure_ascii=False) in folded for key in keys)


def _takes_secret_parameter(name: str, keys: frozenset[str]) -> bool:
    try:
        func = registry.get(name).func
        parameters = inspect.signature(func).parameters
    except (registry.UnknownJobError, TypeError, ValueError):
        return False
    return any(parameter.lower() in keys for parameter in parameters)


def hide(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: no partial leftovers
        text = text.replace(secret, REDACTED)
    return text


def hide_secrets(entry: dict[str, Any], job: Any) -> dict[str, Any]:
    """``entry`` (one error of ``job``, see ``errors.error_entry``) with the secret values of
    the job's arguments replaced in its message and traceback."""
    if not redacted_keys():
        return entry
    _, _, secrets = redact_job_call(job.name, job.args, job.kwargs)
    if not secrets:
        return entry
    return {
        **entry,
        "message": hide(entry["message"], secrets),
        "traceback": hide(entry["traceback"], secrets),
    }
