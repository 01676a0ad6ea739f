"""Per-queue counts of one worker, for the admin dashboard.

Successful jobs are deleted, so what happened (throughput, failures, how long jobs waited) is
kept as an aggregate: ``pgjobs_stat``, one row per queue per minute. Workers count in memory
(``QueueMetrics``) and add their counts with one upsert at most every ``FLUSH_SECONDS``; nothing
is written per job. The dashboard reads them back in ``overview.py``.

Wait
    The time from a job being due (``run_after``) to its claim, measured on the worker's clock
    against the database's ``run_after`` (keep clocks in sync with NTP). Counted in the fixed
    buckets of ``WAIT_BUCKET_BOUNDS``.

Options (module constants)
    ``FLUSH_SECONDS`` (5), ``KEEP_SECONDS`` (2 days of minutes), ``PRUNE_EVERY_SECONDS`` (600).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from . import operations

logger = logging.getLogger("django_pgjobs.metrics")

#: Upper bounds (seconds) of the wait buckets; a last bucket holds everything above.
WAIT_BUCKET_BOUNDS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)
FLUSH_SECONDS = 5.0
KEEP_SECONDS = 2 * 24 * 3600.0
PRUNE_EVERY_SECONDS = 600.0


@dataclass
class QueueCounts:
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    wait_buckets: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKET_BOUNDS) + 1))


def wait_bucket(seconds: float) -> int:
    return bisect.bisect_left(WAIT_BUCKET_BOUNDS, seconds)


class QueueMetrics:
    """In-memory counts of one worker, flushed to ``pgjobs_stat`` by ``maybe_flush``.

    Only the dispatcher thread calls it. A failed flush is logged and its counts dropped: the
    statistics are for people, and must never stop a worker.
    """

    def __init__(self, flush_seconds: float = FLUSH_SECONDS) -> None:
        self.flush_seconds = flush_seconds
        self._counts: dict[str, QueueCounts] = {}
        self._next_flush = time.monotonic() + flush_seconds
        self._next_prune = time.monotonic()

    def _queue(self, queue: str) -> QueueCounts:
        counts = self._counts.get(queue)
        if counts is None:
            counts = self._counts[queue] = QueueCounts()
        return counts

    def claimed(self, jobs: Iterable[Any]) -> None:
        now = timezone.now()  # aware or naive, as the claimed jobs' run_after
        for job in jobs:
            waited = max((now - job.run_after).total_seconds(), 0.0)
            self._queue(job.queue).wait_buckets[wait_bucket(waited)] += 1

    def succeeded(self, job: Any) -> None:
        self._queue(job.queue).succeeded += 1

    def retried(self, job: Any) -> None:
        self._queue(job.queue).retried += 1

    def dead_lettered(self, job: Any) -> None:
        self._queue(job.queue).dead_lettered += 1

    def maybe_flush(self, connection, force: bool = False) -> int:
        """Write the counts when due (or ``force``); returns how many queues' counts went."""
        now = time.monotonic()
        if not force and now < self._next_flush:
            return 0
        self._next_flush = now + self.flush_seconds
        if not self._counts:
            return 0
        counts, self._counts = self._counts, {}
        try:
            operations.record_queue_stats(connection, counts)
            if now >= self._next_prune:
                self._next_prune = now + PRUNE_EVERY_SECONDS
                operations.prune_queue_stats(connection, KEEP_SECONDS)
        except DatabaseError as error:
            logger.warning("could not record queue statistics (dropped): %s", error)
            return 0
        return len(counts)
