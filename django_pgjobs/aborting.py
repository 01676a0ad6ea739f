"""Aborting jobs: ``django_pgjobs.abort(ids)``.

A waiting job is cancelled (deleted, as the admin's "Cancel job" does; a step of a workflow is
kept as ``cancelled`` and its workflow aborted, docs/howto/workflows.md). A running job gets its
abort requested (``pgjobs_job.abort_requested_at``): its worker learns of it at once through
NOTIFY ``pgjobs_abort``, or at its next heartbeat when it does not LISTEN, and sets
``current_job().abort_requested``; a sync handler that polls it stops (best by raising
``Aborted``), an async one is cancelled. Whatever way the attempt then fails, it ends as aborted:
dead-lettered with error type ``Aborted``, never retried. See docs/howto/handlers.md
("Aborting a running job") and docs/explanation/lifecycle.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import db, operations

#: Longest ``requested_by`` stored (the column's length).
REQUESTED_BY_MAX = 255


@dataclass(frozen=True)
class AbortResult:
    """What ``abort()`` did, by job id."""

    #: Running jobs whose abort is now requested (or already was).
    requested: list[int] = field(default_factory=list)
    #: Waiting jobs (due, scheduled, retrying; a workflow's blocked steps) that were cancelled:
    #: deleted, never to run (a workflow's step kept as ``cancelled``, its workflow aborted).
    cancelled: list[int] = field(default_factory=list)
    #: Ids of no waiting or running job: unknown, already finished (or dead-lettered).
    not_found: list[int] = field(default_factory=list)


def abort(
    job_id_or_ids: int | Iterable[int],
    *,
    using: str | None = None,
    requested_by: str = "django_pgjobs.abort()",
) -> AbortResult:
    """Abort one job or several, by id: cancel the waiting ones, request the abort of the running
    ones. Runs on the connection of ``using`` (default: ``PGJOBS["DATABASE"]``) and, inside
    ``transaction.atomic()``, takes effect when the caller commits. ``requested_by`` is stored
    with the request and shown in the dead letter's reason."""
    ids = _job_ids(job_id_or_ids)
    if not isinstance(requested_by, str) or not requested_by.strip():
        raise TypeError(f"requested_by must be a non-empty string, not {requested_by!r}")
    if not ids:
        return AbortResult()
    requested, cancelled = operations.abort_jobs(
        db.jobs_connection(using), ids, requested_by=requested_by[:REQUESTED_BY_MAX]
    )
    done = set(requested) | set(cancelled)
    return AbortResult(
        requested=sorted(requested),
        cancelled=sorted(cancelled),
        not_found=[job_id for job_id in ids if job_id not in done],
    )


def _job_ids(value: int | Iterable[int]) -> list[int]:
    single = isinstance(value, (int, str, bytes)) or not isinstance(value, Iterable)
    values = [value] if single else value
    ids = []
    for item in values:
        item = getattr(item, "pk", item)  # a Job instance stands for its id
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"job ids must be ints, not {item!r}")
        ids.append(item)
    return list(dict.fromkeys(ids))
