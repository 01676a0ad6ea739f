"""Retry control from a handler: ``Retry`` and ``Discard``, and the exception classes of
``@job(retry_on=..., discard_on=...)``.

``raise Retry(after=30)`` ends the attempt and runs the job again in 30 seconds; the attempt is
spent (attempts are counted at claim), so a job that keeps asking is dead-lettered after
``max_attempts``. ``raise Discard("why")`` dead-letters the job at once, whatever attempts are
left. What the worker does with each: ``worker/decisions.py``.
"""

from __future__ import annotations

import math
from datetime import timedelta

from .limits import MAX_SECONDS


class Retry(Exception):  # noqa: N818 - named for what the handler asks, like Celery's Retry
    """Raised by a handler: run the job again after ``after`` seconds (a number or a
    ``timedelta``; None: the job's backoff). Spends the attempt; on the last attempt the job is
    dead-lettered with a reason saying so. ``reason`` is recorded in the job's error history."""

    stored_error_type = "django_pgjobs.Retry"

    def __init__(self, after: float | timedelta | None = None, *, reason: str = "") -> None:
        self.after = check_retry_after(after)
        self.reason = str(reason)
        if reason:
            message = self.reason
        elif self.after is None:
            message = "retry requested"
        else:
            message = f"retry requested in {self.after:g}s"
        super().__init__(message)


class Discard(Exception):  # noqa: N818 - the verb a handler means
    """Raised by a handler: do not retry; the job is dead-lettered at once with this message as
    its reason (its error history is kept)."""

    stored_error_type = "django_pgjobs.Discard"


def check_retry_after(after: float | timedelta | None) -> float | None:
    """``after`` in seconds, or ValueError for what no delay can be."""
    if after is None:
        return None
    if isinstance(after, timedelta):
        after = after.total_seconds()
    if isinstance(after, bool) or not isinstance(after, (int, float)):
        raise TypeError(f"Retry(after=...) takes seconds or a timedelta, not {after!r}")
    if not math.isfinite(after) or not 0 <= after <= MAX_SECONDS:
        raise ValueError(
            f"Retry(after=...) must be between 0 and {MAX_SECONDS:,} seconds, not {after!r}"
        )
    return float(after)


def check_exception_classes(option: str, value: object) -> tuple[type[BaseException], ...] | None:
    """``retry_on``/``discard_on`` of ``@job`` as a tuple of exception classes (None: not
    given); a class alone is accepted as a tuple of one. Anything else is a ValueError."""
    if value is None:
        return None
    classes = (value,) if isinstance(value, type) else value
    if not isinstance(classes, (tuple, list, frozenset, set)):
        raise ValueError(f"{option} must be an exception class or a tuple of them, not {value!r}")
    for item in classes:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ValueError(
                f"{option} must hold exception classes (such as ValueError), not {item!r}"
            )
    return tuple(classes)
