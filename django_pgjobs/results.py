"""Reading a job back by id: ``get_result`` and ``aget_result``.

A job is found in ``pgjobs_job`` (status ``ready``, ``running`` or ``successful``) or, once
dead-lettered, in ``pgjobs_deadletter`` by the id it had (status ``failed``). A successful job's
row exists only while it is retained: jobs enqueued with ``keep_result`` are kept
``PGJOBS["KEEP_RESULTS_SECONDS"]`` with their return value, others ``KEEP_SUCCEEDED_SECONDS``
(0 by default: deleted when they succeed, so not found). A requeued dead letter becomes a new
job with a new id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from asgiref.sync import sync_to_async

from . import db, operations

__all__ = ["JobResult", "JobResultDoesNotExist", "aget_result", "get_result"]

#: The values of ``JobResult.status`` (as ``django.tasks.TaskResultStatus`` names them), and
#: the two of workflow steps: ``blocked`` (waiting for the step before) and ``cancelled``.
STATUSES = ("ready", "running", "successful", "failed", "blocked", "cancelled")


class JobResultDoesNotExist(LookupError):
    """No job with this id in ``pgjobs_job`` nor in ``pgjobs_deadletter``."""


#: The job function's return type (``my_job.get_result()``); Any for ``get_result()``.
T = TypeVar("T")


@dataclass(frozen=True)
class JobResult(Generic[T]):
    """A job as ``get_result`` found it. ``return_value`` is the kept result of a successful job
    that asked for it (``keep_result``), else None. ``errors`` holds one entry per failed
    attempt, oldest first (``type``, ``message``, ``traceback``, ``worker``, ``at``,
    ``attempt``). ``worker_ids`` are the workers that ran its attempts, in order.
    ``task_backend``: the ``TASKS`` alias a ``django.tasks`` task was enqueued through; "" for
    a ``@job``."""

    id: int
    name: str
    queue: str
    priority: int
    args: list
    kwargs: dict
    status: str
    return_value: T | None
    errors: list[dict[str, Any]]
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    run_after: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_ids: list[str]
    keep_result: bool
    task_backend: str = ""
    #: When its first attempt started (``started_at`` is the latest attempt's).
    first_started_at: datetime | None = None
    #: What the job last reported (``current_job().set_progress``): ``done``, ``total``,
    #: ``note``, ``at``; None if it reported nothing (or was dead-lettered).
    progress: dict[str, Any] | None = None
    #: What the job set with ``current_job().set_metadata``; None if nothing.
    metadata: dict[str, Any] | None = None

    @property
    def is_finished(self) -> bool:
        return self.status in ("successful", "failed", "cancelled")


def get_result(job_id: int, *, using: str | None = None) -> JobResult[Any]:
    """The job ``job_id`` (the id ``enqueue()`` returned) as it is now.

    Raises ``JobResultDoesNotExist`` when no job or dead letter has this id. ``using``: the
    database alias (default ``PGJOBS["DATABASE"]``).
    """
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise TypeError(f"job_id must be an int, not {type(job_id).__name__}")
    row = operations.find_job_result(db.jobs_connection(using), job_id)
    if row is None:
        raise JobResultDoesNotExist(f"no job #{job_id}: not in pgjobs_job nor pgjobs_deadletter")
    return _from_row(row)


async def aget_result(job_id: int, *, using: str | None = None) -> JobResult[Any]:
    """``get_result`` for async code."""
    return await sync_to_async(get_result)(job_id, using=using)


def _from_row(row: dict[str, Any]) -> JobResult[Any]:
    errors = row["errors"] if isinstance(row["errors"], list) else []
    worker_ids = [entry["worker"] for entry in errors if _worker_of(entry)]
    if row["status"] in ("running", "successful") and row["worker"]:
        worker_ids.append(row["worker"])  # the attempt running now, or the one that succeeded
    return JobResult(
        id=row["id"],
        name=row["name"],
        queue=row["queue"],
        priority=row["priority"],
        args=row["args"],
        kwargs=row["kwargs"],
        status=row["status"],
        return_value=row["result"] if row["status"] == "successful" else None,
        errors=errors,
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        enqueued_at=db.as_django_reads(row["created_at"]),  # type: ignore[arg-type]  # never NULL
        run_after=db.as_django_reads(row["run_after"]),
        started_at=db.as_django_reads(row["started_at"]),
        finished_at=db.as_django_reads(row["finished_at"]),
        worker_ids=worker_ids,
        keep_result=row["keep_result"],
        task_backend=row["task_backend"],
        first_started_at=db.as_django_reads(row["first_started_at"]),
        progress=row["progress"],
        metadata=row["metadata"],
    )


def _worker_of(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("worker"), str) and entry["worker"]
