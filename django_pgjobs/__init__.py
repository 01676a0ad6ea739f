"""django-pgjobs: background jobs in the PostgreSQL database your Django project already has.

Public API: ``job`` (decorator), ``enqueue``, ``enqueue_many``, ``RetryPolicy``, ``Retry`` and
``Discard`` (raised by handlers), ``get_result``/``aget_result`` (``JobResult``); models in
``django_pgjobs.models`` (``Job``, ``DeadLetter``); the worker is ``manage.py runjobs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "job",
    "enqueue",
    "enqueue_many",
    "JobTimeout",
    "RetryPolicy",
    "Retry",
    "Discard",
    "get_result",
    "aget_result",
    "JobResult",
    "JobResultDoesNotExist",
    "UnknownJobError",
    "__version__",
]

if TYPE_CHECKING:
    from .backoff import RetryPolicy
    from .errors import JobTimeout
    from .models import Job
    from .registry import JobDefinition, UnknownJobError, job
    from .results import JobResult, JobResultDoesNotExist, aget_result, get_result
    from .retries import Discard, Retry


def enqueue(job: JobDefinition | str, *args: Any, **kwargs: Any) -> Job:
    """Enqueue ``job`` (a ``@job`` function or its registered name) with these arguments."""
    from .registry import resolve

    return resolve(job).enqueue(*args, **kwargs)


def enqueue_many(job: JobDefinition | str, calls: Any) -> list[Job]:
    """Enqueue one ``job`` per item of ``calls`` in a single INSERT (see ``<job>.enqueue_many``)."""
    from .registry import resolve

    return resolve(job).enqueue_many(calls)


def __getattr__(name: str) -> Any:
    # Lazy: importing django_pgjobs must not import models before the app registry is ready.
    if name == "job":
        from .registry import job

        return job
    if name == "RetryPolicy":
        from .backoff import RetryPolicy

        return RetryPolicy
    if name == "JobTimeout":
        from .errors import JobTimeout

        return JobTimeout
    if name == "UnknownJobError":
        from .registry import UnknownJobError

        return UnknownJobError
    if name in ("Retry", "Discard"):
        from . import retries

        return getattr(retries, name)
    if name in ("get_result", "aget_result", "JobResult", "JobResultDoesNotExist"):
        from . import results

        return getattr(results, name)
    raise AttributeError(f"module 'django_pgjobs' has no attribute {name!r}")
