"""django-pgjobs: background jobs in the PostgreSQL database your Django project already has.

Public API: ``job`` (decorator), ``enqueue``, ``enqueue_many``, ``abort`` (and ``Aborted``),
``Cron`` (a recurring job's schedule), ``RetryPolicy``, ``Retry`` and ``Discard`` (raised by
handlers), ``get_result``/``aget_result`` (``JobResult``), ``EnqueueOutcome`` and
``UniqueScope`` (unique keys), ``publish`` (the transactional outbox: ``django_pgjobs.outbox``);
models in
``django_pgjobs.models`` (``Job``, ``DeadLetter``); the worker is ``manage.py runjobs``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "job",
    "enqueue",
    "enqueue_many",
    "JobTimeout",
    "abort",
    "Aborted",
    "AbortResult",
    "RetryPolicy",
    "Cron",
    "Retry",
    "Discard",
    "get_result",
    "aget_result",
    "JobResult",
    "JobResultDoesNotExist",
    "UnknownJobError",
    "EnqueueOutcome",
    "UniqueScope",
    "publish",
    "chain",
    "group",
    "__version__",
]

if TYPE_CHECKING:
    from .aborting import AbortResult
    from .backoff import RetryPolicy
    from .cron import Cron
    from .errors import JobTimeout
    from .models import Job
    from .registry import JobDefinition, JobWithOptions, UnknownJobError, job
    from .results import JobResult, JobResultDoesNotExist, aget_result, get_result
    from .retries import Discard, Retry
    from .uniqueness import EnqueueOutcome, UniqueScope
    from .workflows import chain, group


def enqueue(job: JobDefinition | JobWithOptions | str, *args: Any, **kwargs: Any) -> Job:
    """Enqueue ``job`` (a ``@job`` function, with ``.using()`` options or not, or its registered
    name) with these arguments."""
    from .registry import resolve

    return resolve(job).enqueue(*args, **kwargs)


def enqueue_many(job: JobDefinition | JobWithOptions | str, calls: Any) -> list[Job]:
    """Enqueue one ``job`` per item of ``calls`` in a single INSERT (see ``<job>.enqueue_many``)."""
    from .registry import resolve

    return resolve(job).enqueue_many(calls)


def abort(job_id_or_ids: Any, *, using: str | None = None, **options: Any) -> AbortResult:
    """Abort jobs by id: cancel the waiting ones, request the abort of the running ones (see
    ``django_pgjobs.aborting.abort``)."""
    from .aborting import abort as abort_jobs

    return abort_jobs(job_id_or_ids, using=using, **options)


#: The public names this module imports when first asked for, and the module of each.
_LAZY = {
    "job": "registry",
    "UnknownJobError": "registry",
    "EnqueueOutcome": "uniqueness",
    "UniqueScope": "uniqueness",
    "publish": "outbox.publishing",
    "RetryPolicy": "backoff",
    "Cron": "cron",
    "JobTimeout": "errors",
    "Aborted": "errors",
    "AbortResult": "aborting",
    "Retry": "retries",
    "Discard": "retries",
    "get_result": "results",
    "aget_result": "results",
    "JobResult": "results",
    "JobResultDoesNotExist": "results",
    "chain": "workflows",
    "group": "workflows",
}


def __getattr__(name: str) -> Any:
    # Lazy: importing django_pgjobs must not import models before the app registry is ready.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_pgjobs' has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
