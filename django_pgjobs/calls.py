"""The options of one enqueue call: ``CallOptions``.

What ``<job>.using(queue=..., delay=...)`` sets for the calls made through it, apart from the
job's definition (``registry.JobDefinition``, its defaults) and from the statement that writes
the row (``enqueueing``, which reads both). Any other way of giving per-call options maps onto
the same value: ``django.tasks``' ``Task.using(run_after=...)`` (``backend.py``), and Celery's
``apply_async(countdown=, eta=, queue=, priority=)`` (``celery_calls``), which is ``delay``,
``run_after``, ``queue`` and ``priority``.

Depends on nothing of the package but ``validation``: job modules build these at import time,
before Django's app registry is ready.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from .uniqueness import HasUniqueRules
from .validation import (
    check_delay,
    check_flow_key,
    check_max_attempts,
    check_positive_seconds,
    check_priority,
    check_queue,
    check_run_after,
    check_unique_key,
)

__all__ = ["CallOptions", "NO_OPTIONS"]


@dataclasses.dataclass(frozen=True)
class CallOptions(HasUniqueRules):
    """Per-call options; None: not given, the job's own (or the setting's) applies.

    ``queue``, ``priority``, ``max_attempts`` and ``keep_result`` override the job's.
    ``run_after`` (a datetime) or ``delay`` (seconds from the enqueue) say when the job is due;
    give one of them. ``unique_key`` is the key itself (the job's ``unique_key`` callable is not
    called). ``timeout`` (seconds) is stored on the job's row and wins over the job's.
    ``unique_scope``, ``debounce`` and ``throttle`` say how the key is held (``uniqueness``).
    ``concurrency_key`` and ``fairness_key``: the flow control key the job waits on (``flow``).
    Checked when built: a bad value raises ``ValueError`` naming the option.
    """

    queue: str | None = None
    priority: int | None = None
    run_after: datetime | None = None
    delay: float | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    keep_result: bool | None = None
    timeout: float | None = None
    unique_scope: str | None = None
    debounce: bool | str | None = None
    throttle: float | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None

    def __post_init__(self) -> None:
        if self.queue is not None:
            check_queue(self.queue)
        if self.priority is not None:
            check_priority(self.priority)
        if self.run_after is not None:
            check_run_after(self.run_after)
        if self.delay is not None:
            check_delay(self.delay)
        if self.run_after is not None and self.delay is not None:
            raise ValueError("give either delay or run_after, not both")
        check_unique_key(self.unique_key)
        if self.max_attempts is not None:
            check_max_attempts(self.max_attempts)
        if self.keep_result is not None and not isinstance(self.keep_result, bool):
            raise ValueError(f"keep_result must be True or False, not {self.keep_result!r}")
        if self.timeout is not None:
            check_positive_seconds("timeout", self.timeout)
        self.unique_rules  # noqa: B018 (checks them)
        check_flow_key("concurrency_key", self.concurrency_key)
        check_flow_key("fairness_key", self.fairness_key)

    def then(self, later: CallOptions) -> CallOptions:
        """These options with the ones given ``later`` on top: each option given wins, and a
        ``run_after`` or ``delay`` given replaces both (``.using(delay=60).using(run_after=t)``
        is due at ``t``), and a ``debounce`` or ``throttle`` given replaces both."""
        given = {
            field.name: value
            for field in dataclasses.fields(later)
            if (value := getattr(later, field.name)) is not None
        }
        if "run_after" in given or "delay" in given:
            given.setdefault("run_after", None)
            given.setdefault("delay", None)
        if given.get("debounce") or "throttle" in given:
            given.setdefault("debounce", None)
            given.setdefault("throttle", None)
        return dataclasses.replace(self, **given)


#: The options of a plain ``<job>.enqueue(...)``: none given.
NO_OPTIONS = CallOptions()
