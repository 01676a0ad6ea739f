"""Job arguments are JSON, checked before anything is written.

PostgreSQL's ``jsonb`` rejects some values Python's ``json`` accepts (NaN, Infinity, ``\\u0000``)
and ``json`` silently changes others (integer dict keys become strings, tuples become lists).
Python strings may hold lone surrogates that are not text at all, and ints longer than Python
will print. Failing on the database would break the caller's transaction, so everything is checked
here and reported as ``TypeError`` naming the offending path; nothing is written.

``jsonb`` keeps numbers as ``numeric``, which reads back as written in decimal, with two
exceptions for floats: ``json`` writes ``1e16`` and larger in exponent form, which ``numeric``
reads as an integer (``1e+16`` comes back as the int ``10000000000000000``), and ``numeric`` has
no negative zero. So floats of magnitude ``1e16`` and more are written in full with a ``.0``
(``10000000000000000.0``, read back as the same float), and ``-0.0`` is refused.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

#: Deepest nesting of lists and dicts accepted in job arguments (a circular structure hits it).
MAX_NESTING = 100
# Python refuses to print ints of more than 4300 digits (sys.get_int_max_str_digits()).
_MAX_INT_DIGITS = 4300
_MAX_INT_BITS = int(_MAX_INT_DIGITS * 3.32)  # about 10 ** 4297
# json writes floats from this magnitude in exponent form, which jsonb's numeric reads as an int.
_EXPONENT_FORM_FROM = 1e16

_dumps = functools.partial(json.dumps, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class ArgumentsNotJSON(TypeError):
    """Job arguments that cannot be stored as JSON and read back unchanged."""


class PayloadTooLarge(ValueError):
    """Job arguments larger than ``PGJOBS["MAX_PAYLOAD_BYTES"]``."""


class Undecodable:
    """A stored JSON value Python cannot decode (jsonb nests deeper than Python's recursion
    limit). Only a row written around ``enqueue()`` holds one; the worker dead-letters its job
    with ``reason`` instead of crashing on it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<undecodable JSON: {self.reason}>"


def _check(value: Any, path: str, depth: int = 0) -> bool:
    """Raise ``ArgumentsNotJSON`` for what cannot be stored and read back unchanged; True when
    ``value`` holds a float that must be written in full (see the module docstring)."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise ArgumentsNotJSON(
                f"{path} is an int of about {_MAX_INT_DIGITS} digits or more; pass it as a string"
            )
        return False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentsNotJSON(f"{path} is {value!r}; JSON has no NaN or Infinity")
        if value == 0 and math.copysign(1.0, value) < 0:
            raise ArgumentsNotJSON(
                f"{path} is -0.0, which would read back as 0.0 (jsonb stores numbers as numeric, "
                "which has no negative zero); pass 0.0, or the sign separately"
            )
        return abs(value) >= _EXPONENT_FORM_FROM
    if isinstance(value, str):
        if "\x00" in value:
            raise ArgumentsNotJSON(
                f"{path} contains a NUL character (\\u0000), which jsonb rejects"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ArgumentsNotJSON(
                f"{path} contains a lone surrogate ({value[error.start]!r}), which is not text "
                "(decode bytes with errors='replace' or pass them base64-encoded)"
            ) from None
        return False
    if depth >= MAX_NESTING:
        raise ArgumentsNotJSON(
            f"{path} nests lists and dicts deeper than {MAX_NESTING} levels (a circular reference?)"
        )
    if isinstance(value, (list, tuple)):
        large_floats = False
        for index, item in enumerate(value):
            large_floats |= _check(item, f"{path}[{index}]", depth + 1)
        return large_floats
    if isinstance(value, dict):
        large_floats = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsNotJSON(
                    f"{path} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                    "must be strings"
                )
            _check(key, f"{path} key", depth + 1)
            large_floats |= _check(item, f"{path}[{key!r}]", depth + 1)
        return large_floats
    raise ArgumentsNotJSON(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids, strings, numbers, lists and dicts (for a model instance, pass its pk)"
    )


def dump_arguments(args: tuple | list, kwargs: dict, max_bytes: int) -> tuple[str, str]:
    """Validate and serialise ``args``/``kwargs``; returns the two JSON texts."""
    if not args and not kwargs:  # many jobs take no arguments: nothing to check or encode
        return "[]", "{}"
    args_json = _dump_checked(list(args), "args")
    kwargs_json = _dump_checked(kwargs, "kwargs")
    size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > max_bytes:
        raise PayloadTooLarge(
            f"job arguments are {size} bytes of JSON, over PGJOBS['MAX_PAYLOAD_BYTES'] = "
            f"{max_bytes}; store large data elsewhere and pass a reference"
        )
    return args_json, kwargs_json


class ResultNotJSON(TypeError):
    """A job's return value, kept as its result, that cannot be stored as JSON and read back
    unchanged (the same rules as arguments): a failed attempt, never a success."""


def dump_result(value: Any, max_bytes: int) -> str:
    """Validate and serialise a job's return value; returns the JSON text."""
    if value is None:
        return "null"
    try:
        return _dump_bounded(value, "the return value", max_bytes, "return", ResultNotJSON)
    except ArgumentsNotJSON as error:
        raise ResultNotJSON(f"{error}; the result of a job is kept as JSON") from None


def dump_payload(value: Any, max_bytes: int) -> str:
    """Validate and serialise an outbox event's payload (the rules of job arguments); returns
    the JSON text. Raises ``ArgumentsNotJSON`` or ``PayloadTooLarge``; nothing is written."""
    return _dump_bounded(value, "the payload", max_bytes, "publish", PayloadTooLarge)


def _dump_bounded(value: Any, what: str, max_bytes: int, verb: str, too_large: type) -> str:
    """The checked JSON text of ``value``; ``too_large`` beyond ``max_bytes``."""
    text = _dump_checked(value, what)
    size = len(text.encode())
    if size > max_bytes:
        raise too_large(
            f"{what} is {size} bytes of JSON, over PGJOBS['MAX_PAYLOAD_BYTES'] = "
            f"{max_bytes}; store large data elsewhere and {verb} a reference"
        )
    return text


def _dump_checked(value: Any, path: str) -> str:
    return _dump_floats_in_full(value) if _check(value, path) else _dumps(value)


def _dump_floats_in_full(value: Any) -> str:
    """JSON text with floats of ``1e16`` and more written as ``<integer>.0``: such a float is a
    whole number, and the ``.0`` makes numeric keep it a float (checked values only)."""
    if isinstance(value, float) and abs(value) >= _EXPONENT_FORM_FROM:
        return f"{int(value)}.0"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump_floats_in_full(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{_dumps(key)}:{_dump_floats_in_full(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    return _dumps(value)
