"""Celery's spellings of enqueue: ``<job>.delay(...)`` and ``<job>.apply_async(...)``.

``delay(*args, **kwargs)`` is ``enqueue(*args, **kwargs)``. ``apply_async(args, kwargs,
countdown=, eta=, queue=, priority=)`` is ``using(delay=countdown, run_after=eta, queue=queue,
priority=priority).enqueue(*args, **kwargs)``. Both are the same INSERT on the caller's
connection, so inside ``transaction.atomic()`` the job commits or rolls back with the caller.

Celery's other options change what a call does (an expiry, callbacks, a task id, a serializer);
none of them has a meaning here, so each is refused with a ``TypeError`` that says what to use
instead, never ignored. docs/howto/from-celery.md lists them.

Depends on nothing of the package but ``validation``: job modules build definitions at import
time, before Django's app registry is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

from .validation import check_delay, check_run_after

if TYPE_CHECKING:  # for type checkers only: job modules load before the app registry
    from .models import Job

#: A job function's parameters and return type (``registry.JobDefinition``).
P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["CeleryCalls", "REFUSED_OPTIONS"]

_USING = "<job>.using({option}=...).apply_async(...)"

#: Each option of Celery's ``apply_async`` that is refused, with what to use instead.
REFUSED_OPTIONS: dict[str, str] = {
    "expires": (
        "jobs do not expire: a job runs however late it is claimed. Check its age in the job "
        "(current_job().created_at) and return early, or cancel waiting jobs with "
        "django_pgjobs.abort()"
    ),
    "task_id": (
        "job ids are the rows' ids, given by the database (the returned Job's id); to keep one "
        "job per key in flight use " + _USING.format(option="unique_key")
    ),
    "link": "there are no callbacks: enqueue the next job at the end of the job",
    "link_error": "there are no error callbacks: handle the failure in the job (except ...)",
    "retry": (
        "enqueueing is an INSERT on your database connection, not a publish to a broker: there "
        "is no publish to retry, a failure raises. Retries of the job itself: @job(max_attempts=, "
        "retry=RetryPolicy(...))"
    ),
    "serializer": "arguments are always JSON (stored as jsonb); there is no pickle",
    "compression": "arguments are stored as jsonb; there is no compression option",
    "headers": "there are no message headers: pass what the job needs as arguments",
    "exchange": "there is no broker routing: name the queue with queue=",
    "routing_key": "there is no broker routing: name the queue with queue=",
    "time_limit": "use " + _USING.format(option="timeout") + " (seconds)",
    "soft_time_limit": (
        "there is no soft limit: " + _USING.format(option="timeout") + " fails the attempt with "
        "JobTimeout (an async job is cancelled)"
    ),
    "ignore_result": (
        "results are kept only when asked for: @job(keep_result=True) or "
        + _USING.format(option="keep_result")
    ),
    "shadow": "a job is stored and shown under its registered name: @job(name=...)",
}
REFUSED_OPTIONS["retry_policy"] = REFUSED_OPTIONS["retry"]

#: The per-call options of ``.using()``: given to ``apply_async``, they are pointed there.
_USING_OPTIONS = ("run_after", "delay", "unique_key", "max_attempts", "keep_result", "timeout")


def refused_option(name: str) -> str:
    """Why ``apply_async(name=...)`` is refused and what to use instead."""
    if name in REFUSED_OPTIONS:
        return REFUSED_OPTIONS[name]
    if name in _USING_OPTIONS:
        return f"it is an option of .using(): {_USING.format(option=name)}"
    return (
        "not an option here: apply_async() takes args, kwargs, countdown, eta, queue and "
        "priority, other per-call options go through .using(...) (docs/howto/from-celery.md)"
    )


def _checked(option: str, check: Callable[[Any], Any], value: Any) -> Any:
    """``value`` checked by ``check``; its ``ValueError`` names the Celery option given."""
    try:
        check(value)
    except ValueError as error:
        raise ValueError(f"apply_async({option}=...): {error}") from None
    return value


def apply_async_options(countdown: Any, eta: Any, queue: Any, priority: Any) -> dict[str, Any]:
    """The ``.using()`` options that Celery's ``countdown``, ``eta``, ``queue`` and ``priority``
    stand for (the ones given). ``priority`` keeps this package's meaning: -100..100, higher
    runs first."""
    if countdown is not None and eta is not None:
        raise ValueError("apply_async(): give either countdown or eta, not both")
    given = {"queue": queue, "priority": priority}
    if countdown is not None:
        given["delay"] = _checked("countdown", check_delay, countdown)
    if eta is not None:
        given["run_after"] = _checked("eta", check_run_after, eta)
    return {option: value for option, value in given.items() if value is not None}


def call_arguments(args: Any, kwargs: Any) -> tuple[tuple, dict]:
    """Celery's ``args`` (a list or tuple) and ``kwargs`` (a mapping), checked."""
    args = () if args is None else args
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(args, (list, tuple)):
        raise TypeError(
            "apply_async(args=...) must be a list or tuple of the job's positional arguments, "
            f"not {type(args).__name__} (one argument x: args=[x])"
        )
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            "apply_async(kwargs=...) must be a dict of the job's keyword arguments, not "
            f"{type(kwargs).__name__}"
        )
    return tuple(args), dict(kwargs)


class CeleryCalls(Generic[P, R]):
    """``delay()`` and ``apply_async()`` for a class with ``using(**options)`` and
    ``enqueue(*args, **kwargs)`` (``registry.JobDefinition`` and ``JobWithOptions``), typed by
    the job function's parameters ``P``."""

    if TYPE_CHECKING:

        def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job: ...
        def using(self, **options: Any) -> CeleryCalls[P, R]: ...

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Celery's spelling of ``enqueue(*args, **kwargs)``; returns the saved ``Job``."""
        return self.enqueue(*args, **kwargs)

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        *,
        countdown: float | None = None,
        eta: Any = None,
        queue: str | None = None,
        priority: int | None = None,
        **celery_options: Any,
    ) -> Job:
        """Celery's spelling of ``using(...).enqueue(*args, **kwargs)``: ``countdown`` is
        ``delay`` (seconds), ``eta`` is ``run_after`` (an aware datetime), ``queue`` and
        ``priority`` (-100..100, higher first) are ours. Any other option raises ``TypeError``
        saying what to use instead. Returns the saved ``Job``."""
        if celery_options:
            reasons = "; ".join(
                f"{name}=: {refused_option(name)}" for name in sorted(celery_options)
            )
            raise TypeError(f"apply_async() does not take {reasons}")
        call_args, call_kwargs = call_arguments(args, kwargs)
        options = apply_async_options(countdown, eta, queue, priority)
        target = self.using(**options) if options else self
        # Celery's args and kwargs are one list and one dict: not checked against P
        return cast(Any, target).enqueue(*call_args, **call_kwargs)
