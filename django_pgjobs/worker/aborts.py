"""Aborts of held jobs: how the dispatcher learns that an abort was requested, and what it does.

``django_pgjobs.abort()`` (or the admin's "Abort") sets ``abort_requested_at`` on a running job
and sends NOTIFY ``pgjobs_abort`` with the ids of that request's jobs (comma-separated). The
listener passes it on as an ``AbortNotice``; a worker that does not LISTEN learns it from its
next heartbeat (``extend_leases`` returns which held jobs have an abort requested). Either way
the dispatcher marks the held ``ClaimedJob`` (``abort_requested``, what ``current_job()`` shows
the handler) and cancels an async job's task (``ExecutorPool.cancel_async``). How the attempt
then ends: ``failures.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import Aborted
from .executors import ExecutorPool
from .state import DispatcherState

logger = logging.getLogger("django_pgjobs.worker")

ABORT_CHANNEL = "pgjobs_abort"


@dataclass
class AbortNotice:
    """(Listener to dispatcher.) An abort was requested for the jobs with these ids (one
    request's, marked together)."""

    job_ids: tuple[int, ...]


def parse_notice(payload: str) -> AbortNotice | None:
    """The ids of a ``pgjobs_abort`` payload: comma-separated (one id before 2026-11-28)."""
    try:
        return AbortNotice(tuple(int(part) for part in payload.split(",")))
    except ValueError:
        return None  # not ours: a NOTIFY on the channel by something else


def mark_aborted(state: DispatcherState, executors: ExecutorPool, job_ids: Iterable[int]) -> int:
    """(Dispatcher.) Mark the held jobs among ``job_ids`` as abort requested; returns how many
    were newly marked. Ids this worker does not hold are someone else's (or finished).

    Every job is marked before any task is cancelled or any line logged: an executor whose job
    stops on its mark (``raise_if_aborted``) takes its next held job at once, and that job's
    mark must be there already (an aborted workflow's held step would run otherwise)."""
    state.owner.check()
    newly = []
    for job_id in job_ids:
        job = state.held.get(job_id)
        if job is None or job.abort_requested:
            continue
        job.abort_requested = True
        newly.append(job)
    for job in newly:
        # an async job's task is cancelled now; its outcome is then a failure with this error
        error = Aborted(f"job #{job.id} was cancelled: its abort was requested")
        cancelled = executors.cancel_async(job, error)
        logger.warning(
            "job %s #%s: abort requested%s",
            job.name,
            job.id,
            " (its task was cancelled)" if cancelled else "",
        )
    return len(newly)
