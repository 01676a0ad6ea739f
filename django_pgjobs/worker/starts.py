"""The starts of held jobs, recorded in their rows by the dispatcher.

A job the claim holds for a busy worker has neither its attempt counted nor its start recorded
(``started_at`` empty): a worker that dies holding it gives it back unspent (invariant 15). When
an executor takes such a job it tells the dispatcher (``Started``) and runs it at once; the
dispatcher records the start (``mark_started``: the attempt counted) ``MARK_DELAY_SECONDS``
later, in one statement for every start of that span, unless the job has finished by then: the
statement that ends the attempt (acknowledgement, retry, dead letter) counts it instead. Short
jobs, the ones worth holding, thus cost no statement of their own.

A worker killed within that span leaves a started job unrecorded: the rescue gives it back with
its attempt unspent but marked ``returned_unstarted``, and the claim only takes such a job to
start it at once, its attempt counted before it runs: a job that kills its worker as it starts
spends its attempts all the same. Dispatcher thread only. See ``docs/explanation/claim.md``.
"""

from __future__ import annotations

import time

from .. import operations
from ..operations import ClaimedJob

MARK_DELAY_SECONDS = 0.05


class PendingStarts:
    def __init__(self, worker) -> None:
        self.worker = worker
        # job id -> (job, monotonic time it started), oldest first
        self.pending: dict[int, tuple[ClaimedJob, float]] = {}

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, job: ClaimedJob, at: float) -> None:
        """An executor started held ``job`` at ``at``."""
        if job.held and self.worker.held.get(job.id) is job:
            self.pending[job.id] = (job, at)

    def drop(self, job: ClaimedJob) -> None:
        """``job`` finished: the statement ending its attempt counts it."""
        entry = self.pending.get(job.id)
        if entry is not None and entry[0] is job:
            del self.pending[job.id]

    def deadline(self) -> float | None:
        """When the oldest start waiting to be recorded is due, if any waits."""
        if not self.pending:
            return None
        _, oldest = next(iter(self.pending.values()))
        return oldest + MARK_DELAY_SECONDS

    def due(self) -> bool:
        deadline = self.deadline()
        return deadline is not None and time.monotonic() >= deadline

    def flush(self) -> None:
        """Record every pending start in one statement (a failure keeps them pending)."""
        now = time.monotonic()
        started = [(job, now - at) for job, at in self.pending.values()]
        operations.mark_started(self.worker.db.connection(), started)
        for job, _ in started:
            job.held = False  # recorded, or no longer this worker's
        self.pending.clear()
