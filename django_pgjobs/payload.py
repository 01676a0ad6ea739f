"""Job arguments are JSON, checked before anything is written.

PostgreSQL's ``jsonb`` rejects some values Python's ``json`` accepts (NaN, Infinity, ``\\u0000``)
and ``json`` silently changes others (integer dict keys become strings, tuples become lists).
Python strings may hold lone surrogates that are not text at all, and ints longer than Python
will print. Failing on the database would break the caller's transaction, so everything is checked
here and reported as ``TypeError`` naming the offending path; nothing is written.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: Deepest nesting of lists and dicts accepted in job arguments (a circular structure hits it).
MAX_NESTING = 100
# Python refuses to print ints of more than 4300 digits (sys.get_int_max_str_digits()).
_MAX_INT_DIGITS = 4300
_MAX_INT_BITS = int(_MAX_INT_DIGITS * 3.32)  # about 10 ** 4297


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


def _check(value: Any, path: str, depth: int = 0) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise ArgumentsNotJSON(
                f"{path} is an int of about {_MAX_INT_DIGITS} digits or more; pass it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentsNotJSON(f"{path} is {value!r}; JSON has no NaN or Infinity")
        return
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
        return
    if depth >= MAX_NESTING:
        raise ArgumentsNotJSON(
            f"{path} nests lists and dicts deeper than {MAX_NESTING} levels (a circular reference?)"
        )
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsNotJSON(
                    f"{path} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                    "must be strings"
                )
            _check(key, f"{path} key", depth + 1)
            _check(item, f"{path}[{key!r}]", depth + 1)
        return
    raise ArgumentsNotJSON(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids, strings, numbers, lists and dicts (for a model instance, pass its pk)"
    )


def dump_arguments(args: tuple | list, kwargs: dict, max_bytes: int) -> tuple[str, str]:
    """Validate and serialise ``args``/``kwargs``; returns the two JSON texts."""
    if not args and not kwargs:  # many jobs take no arguments: nothing to check or encode
        return "[]", "{}"
    _check(list(args), "args")
    _check(kwargs, "kwargs")
    args_json = json.dumps(list(args), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    kwargs_json = json.dumps(kwargs, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > max_bytes:
        raise PayloadTooLarge(
            f"job arguments are {size} bytes of JSON, over PGJOBS['MAX_PAYLOAD_BYTES'] = "
            f"{max_bytes}; store large data elsewhere and pass a reference"
        )
    return args_json, kwargs_json
