"""Acknowledgements: successes of non-atomic jobs, sent in batches.

A finished job's acknowledgement waits up to ``ACK_DELAY_SECONDS`` to share a statement with
others, or rides on the next claim (``operations.complete(..., claim=...)``). A worker killed
meanwhile loses nothing: the job runs again after its lease. Jobs that keep their result
(``keep_result``) wait in a list of their own and go in a statement that stores the return
values (``operations.complete(..., results=...)``), sent before the claim. Dispatcher thread
only. See ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import time

from .. import operations
from ..operations import ClaimedJob
from .faults import DispatcherDatabase
from .state import DispatcherState

logger = logging.getLogger("django_pgjobs.worker")

ACK_DELAY_SECONDS = 0.05


class Acknowledgements:
    def __init__(self, db: DispatcherDatabase, state: DispatcherState, batch_size: int) -> None:
        self.db = db
        self.state = state
        self.batch_size = batch_size
        self.pending: list[ClaimedJob] = []
        self.with_results: list[tuple[ClaimedJob, str]] = []  # (job, return value as JSON)
        self.oldest_since = 0.0  # when the oldest unsent acknowledgement was queued

    def __len__(self) -> int:
        return len(self.pending) + len(self.with_results)

    def add(self, job: ClaimedJob, result: str | None = None) -> None:
        """``result``: the return value as JSON, for a job that keeps it."""
        self.state.owner.check()
        if not len(self):
            self.oldest_since = time.monotonic()
        if job.keep_result:
            self.with_results.append((job, "null" if result is None else result))
        else:
            self.pending.append(job)

    def unacknowledged(self, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """(Any thread: reads copies, no lock; the stop's log line.) ``jobs`` but for those
        that succeeded and wait here for their acknowledgement."""
        waiting = {job.id for job in list(self.pending)}
        waiting.update(job.id for job, _ in list(self.with_results))
        return [job for job in jobs if job.id not in waiting]

    def due(self) -> bool:
        """Send acknowledgements alone when enough wait, when nothing else is held (the batch
        cannot grow), or when the oldest has waited ``ACK_DELAY_SECONDS``."""
        waiting = len(self)
        return bool(waiting) and (
            waiting >= self.batch_size
            or waiting == len(self.state.held)
            or time.monotonic() - self.oldest_since >= ACK_DELAY_SECONDS
        )

    def deadline(self) -> float | None:
        """When the loop must wake to send them, if any wait."""
        return self.oldest_since + ACK_DELAY_SECONDS if len(self) else None

    def flush(self) -> None:
        """Send the pending acknowledgements in one statement (two with results)."""
        if self.pending:
            batch = self.pending
            self.sent(batch, operations.complete(self.db.connection(), batch).ids)
        self.flush_results()

    def flush_results(self) -> None:
        """Send the acknowledgements that store results, in one statement."""
        if self.with_results:
            jobs = [job for job, _ in self.with_results]
            results = [result for _, result in self.with_results]
            done = operations.complete(self.db.connection(), jobs, results=results).ids
            self.with_results = []
            self.settle(jobs, done)

    def sent(self, batch: list[ClaimedJob], done: set[int]) -> None:
        """``batch`` (the pending list) went out in a statement that committed; a statement
        that failed leaves them pending, to go with the next one."""
        self.pending = []
        self.settle(batch, done)

    def settle(self, batch: list[ClaimedJob], done: set[int]) -> None:
        """Count a sent batch: ``done`` holds the ids the database completed (claim token still
        ours); the others had lost their lease."""
        state = self.state
        state.owner.check()
        for job in batch:
            state.finished(job)
            if job.id in done:
                state.stats.succeeded += 1
                state.metrics.succeeded(job)
            else:
                state.stats.lost += 1
                logger.warning(
                    "job %s #%s succeeded but its lease was lost before the acknowledgement; "
                    "another worker may run it again",
                    job.name,
                    job.id,
                )
