"""Job arguments are JSON, checked before anything is written.

PostgreSQL's ``jsonb`` rejects some values Python's ``json`` accepts (NaN, Infinity, ``\\u0000``)
and ``json`` silently changes others (integer dict keys become strings, tuples become lists).
Failing on the database would break the caller's transaction, so everything is checked here and
reported as ``TypeError`` naming the offending path; nothing is written.
"""

from __future__ import annotations

import json
import math
from typing import Any


class ArgumentsNotJSON(TypeError):
    """Job arguments that cannot be stored as JSON and read back unchanged."""


class PayloadTooLarge(ValueError):
    """Job arguments larger than ``PGJOBS["MAX_PAYLOAD_BYTES"]``."""


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, (bool, int)):
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
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsNotJSON(
                    f"{path} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                    "must be strings"
                )
            _check(key, f"{path} key")
            _check(item, f"{path}[{key!r}]")
        return
    raise ArgumentsNotJSON(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids, strings, numbers, lists and dicts (for a model instance, pass its pk)"
    )


def dump_arguments(args: tuple | list, kwargs: dict, max_bytes: int) -> tuple[str, str]:
    """Validate and serialise ``args``/``kwargs``; returns the two JSON texts."""
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
