"""Checking the options of jobs and settings: queue names, priorities, delays, unique keys,
flow control (concurrency limits and keys, rate limits, fairness keys).

Shared by ``@job``, ``.using()``, ``enqueue()``, the settings (``DEFAULT_QUEUE``) and the
operator actions; inside the package it depends on nothing but ``limits``, so that all of them can import it.
"""

from __future__ import annotations

import inspect
import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from .limits import (
    CONCURRENCY_LIMIT_MAX,
    FLOW_USER_KEY_MAX,
    MAX_ATTEMPTS_MAX,
    MAX_SECONDS,
    NAME_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_NAME_MAX,
    UNIQUE_KEY_MAX,
)

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


def check_queue(queue: Any) -> str:
    if not isinstance(queue, str):
        raise ValueError(f"queue must be a string, not {type(queue).__name__}")
    if not queue or len(queue) > QUEUE_NAME_MAX or not QUEUE_NAME_RE.match(queue):
        raise ValueError(
            f"queue must be 1..{QUEUE_NAME_MAX} characters of letters, digits, '_', '-', '.' or "
            f"':' starting with a letter or digit, not {queue!r}"
        )
    return queue


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an int, not {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(
            f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, not {priority}"
        )
    return priority


def check_max_attempts(max_attempts: Any) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValueError(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= MAX_ATTEMPTS_MAX:
        raise ValueError(
            f"max_attempts must be between 1 and {MAX_ATTEMPTS_MAX}, not {max_attempts}"
        )
    return max_attempts


def check_positive_seconds(option: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_SECONDS
    ):
        raise ValueError(
            f"{option} must be a number of seconds greater than 0 and at most {MAX_SECONDS:,} "
            f"(10 years), not {value!r}"
        )
    return float(value)


def check_count(option: str, value: Any, low: int) -> int:
    """A worker's count option (``concurrency``, ``batch_size``, ``prefetch``...)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{option} must be an int >= {low}, not {value!r}")
    return value


def check_seconds(option: str, value: Any) -> float:
    """A number of seconds from 0 to ``MAX_SECONDS``: a delay, a worker's shutdown grace."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{option} must be a number of seconds, not {type(value).__name__}")
    if not 0 <= value <= MAX_SECONDS:  # also refuses NaN
        raise ValueError(
            f"{option} must be a number of seconds from 0 to {MAX_SECONDS:,} (10 years), "
            f"not {value!r}"
        )
    return float(value)


def check_delay(delay: Any) -> float:
    return check_seconds("delay", delay)


def check_run_after(run_after: Any) -> datetime:
    if not isinstance(run_after, datetime):
        raise ValueError(f"run_after must be a datetime, not {type(run_after).__name__}")
    if settings.USE_TZ and timezone.is_naive(run_after):
        raise ValueError(
            "run_after must be timezone-aware (a naive datetime is ambiguous); "
            "use django.utils.timezone.now() + timedelta(...)"
        )
    return run_after


def check_text(option: str, value: str) -> str:
    """Refuse what a PostgreSQL ``text`` column cannot hold: NUL and lone surrogates."""
    if "\x00" in value:
        raise ValueError(f"{option} must not contain NUL characters, not {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{option} must be text, but contains a lone surrogate "
            f"({value[error.start]!r}) at position {error.start}: {value!r}"
        ) from None
    return value


def check_unique_key(unique_key: Any) -> str | None:
    if unique_key is None:
        return None
    if not isinstance(unique_key, str) or not unique_key or len(unique_key) > UNIQUE_KEY_MAX:
        raise ValueError(
            f"unique_key must be a non-empty string of at most {UNIQUE_KEY_MAX} characters, "
            f"not {unique_key!r}"
        )
    return check_text("unique_key", unique_key)


def unique_key_of_call(definition: Any, args: Any, kwargs: dict) -> str | None:
    """The key ``@job(unique_key=...)`` gives one call (None: the job has no key function, or
    it returned None), checked (``check_unique_key``). The function is called with the
    arguments as given to ``enqueue()``, the job's defaults not filled in; one that does not
    accept them raises ``TypeError`` naming the option and the job."""
    key_function = getattr(definition, "unique_key", None)
    if key_function is None:
        return None
    try:
        key = key_function(*args, **kwargs)
    except TypeError as error:
        if _binds(key_function, args, kwargs):
            raise  # a TypeError of its own code, not of its parameters
        raise TypeError(
            f"unique_key of {definition.name} does not take this call's arguments ({error}): "
            "it is called with the arguments as given to enqueue(), the job's defaults not "
            "filled in, so give its parameters the job's defaults"
        ) from error
    return check_unique_key(key)


def _binds(function: Any, args: Any, kwargs: dict) -> bool:
    """Whether ``function``'s parameters accept this call (True when it has no signature to
    tell)."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin)
        return True
    return True


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > NAME_MAX:
        raise ValueError(f"job name must be 1..{NAME_MAX} characters, not {name!r}")
    return check_text("job name", name)


#: The unique scopes (``uniqueness.UniqueScope``): how long a job holds its unique key.
UNIQUE_SCOPES = ("in_flight", "waiting")
#: What a debounced enqueue may replace alone in the waiting job holding its key (True: both).
DEBOUNCE_VALUES = ("args", "run_after")


def check_unique_scope(scope: Any) -> str:
    if not isinstance(scope, str) or scope not in UNIQUE_SCOPES:
        raise ValueError(
            f"unique_scope must be 'in_flight' (the key is held while the job waits and while it "
            f"runs) or 'waiting' (held until a worker takes it), not {scope!r}"
        )
    return scope


def check_debounce(debounce: Any) -> bool | str:
    if isinstance(debounce, bool) or (isinstance(debounce, str) and debounce in DEBOUNCE_VALUES):
        return debounce
    raise ValueError(
        "debounce must be True (a newer enqueue replaces the waiting job's arguments and moves "
        "its run_after), 'args', 'run_after' or False, not " + repr(debounce)
    )


def check_throttle(throttle: Any) -> float:
    return check_positive_seconds("throttle", throttle)


# -- flow control (flow.py) ----------------------------------------------------------------------

RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h)\s*$")
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
#: A rate limit's bucket holds this many seconds' worth of its rate (at least one job): the
#: burst a key may start at once after a quiet spell (docs/howto/flow-control.md).
BURST_SECONDS = 0.1


def check_concurrency_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"concurrency_limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= CONCURRENCY_LIMIT_MAX:
        raise ValueError(
            f"concurrency_limit must be between 1 and {CONCURRENCY_LIMIT_MAX:,}, not {limit}"
        )
    return limit


def check_rate_limit(rate_limit: Any, option: str = "rate_limit") -> tuple[float, float]:
    """``"20/s"``, ``"100/m"``, ``"1000/h"`` as (jobs per second, bucket size)."""
    match = RATE_RE.match(rate_limit) if isinstance(rate_limit, str) else None
    if match is None or float(match[1]) <= 0:
        raise ValueError(
            f"{option} must be a number of jobs greater than 0 per second, minute or hour, "
            f"written like '20/s', '100/m' or '1000/h', not {rate_limit!r}"
        )
    per_second = float(match[1]) / RATE_UNITS[match[2]]
    return per_second, max(1.0, per_second * BURST_SECONDS)


def check_flow_limits(concurrency_limit: Any, rate_limit: Any) -> None:
    """``@job(concurrency_limit=..., rate_limit=...)``, each when given."""
    if concurrency_limit is not None:
        check_concurrency_limit(concurrency_limit)
    if rate_limit is not None:
        check_rate_limit(rate_limit)


def check_flow_key(option: str, key: Any) -> str | None:
    """A ``concurrency_key`` or ``fairness_key``."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > FLOW_USER_KEY_MAX:
        raise ValueError(
            f"{option} must be a non-empty string of at most {FLOW_USER_KEY_MAX} characters, "
            f"not {key!r}"
        )
    return check_text(option, key)


def check_queue_rate_limits(limits: Any) -> dict[str, str]:
    """The setting ``QUEUE_RATE_LIMITS``: queue names to rate limits."""
    for queue, rate_limit in limits.items():
        check_queue(queue)
        check_rate_limit(rate_limit, f"the rate limit of queue {queue!r}")
    return limits
