"""Acknowledgements: successes of non-atomic jobs, sent in batches.

A finished job's acknowledgement waits up to ``ACK_DELAY_SECONDS`` to share a statement with
others, or rides on the next claim (``complete_and_claim_jobs``). A worker killed meanwhile
loses nothing: the job runs again after its lease. Dispatcher thread only. See
``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import time

from .. import operations
from ..operations import ClaimedJob

logger = logging.getLogger("django_pgjobs.worker")

ACK_DELAY_SECONDS = 0.05


class Acknowledgements:
    def __init__(self, worker) -> None:
        self.worker = worker
        self.pending: list[ClaimedJob] = []
        self.oldest_since = 0.0  # when the oldest unsent acknowledgement was queued

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, job: ClaimedJob) -> None:
        self.worker.owner.check()
        if not self.pending:
            self.oldest_since = time.monotonic()
        self.pending.append(job)

    def due(self) -> bool:
        """Send acknowledgements alone when enough wait, when nothing else is held (the batch
        cannot grow), or when the oldest has waited ``ACK_DELAY_SECONDS``."""
        pending = self.pending
        return bool(pending) and (
            len(pending) >= self.worker.batch_size
            or len(pending) == len(self.worker.held)
            or time.monotonic() - self.oldest_since >= ACK_DELAY_SECONDS
        )

    def deadline(self) -> float | None:
        """When the loop must wake to send them, if any wait."""
        return self.oldest_since + ACK_DELAY_SECONDS if self.pending else None

    def flush(self) -> None:
        """Send the pending acknowledgements in one statement."""
        if self.pending:
            batch = self.pending
            self.sent(batch, operations.complete_jobs(self.worker.db.connection(), batch))

    def sent(self, batch: list[ClaimedJob], done: set[int]) -> None:
        """``batch`` (the pending list) went out in a statement that committed; a statement
        that failed leaves them pending, to go with the next one."""
        self.pending = []
        self.settle(batch, done)

    def settle(self, batch: list[ClaimedJob], done: set[int]) -> None:
        """Count a sent batch: ``done`` holds the ids the database completed (claim token still
        ours); the others had lost their lease."""
        worker = self.worker
        worker.owner.check()
        for job in batch:
            worker.finish(job)
            if job.id in done:
                worker.stats.succeeded += 1
                worker.metrics.succeeded(job)
            else:
                worker.stats.lost += 1
                logger.warning(
                    "job %s #%s succeeded but its lease was lost before the acknowledgement; "
                    "another worker may run it again",
                    job.name,
                    job.id,
                )
