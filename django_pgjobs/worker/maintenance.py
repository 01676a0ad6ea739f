"""Periodic maintenance: small units the dispatcher runs between claims.

Each unit does one duty in ``run_once()`` and says when it is next due (``interval``). The
dispatcher runs the due units on its own thread and connection; a unit whose statement fails on
a "not right now" error stays due and runs again after the loop's back-off.

The units, their intervals and what each does: ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import random
import time

from .. import operations
from .aborts import mark_aborted

logger = logging.getLogger("django_pgjobs.worker")


class MaintenanceUnit:
    """One periodic duty: first due one ``interval()`` after start (``first_delay()``), then
    every ``interval()``."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.next_due = time.monotonic() + self.first_delay()

    def interval(self) -> float:
        raise NotImplementedError

    def first_delay(self) -> float:
        return self.interval()

    def run_once(self) -> None:
        raise NotImplementedError

    def run_if_due(self, now: float) -> None:
        if now >= self.next_due:
            self.run_once()
            self.next_due = now + self.interval()


class MetricsFlush(MaintenanceUnit):
    def interval(self) -> float:
        return self.worker.metrics.flush_seconds

    def run_once(self) -> None:
        self.worker.metrics.maybe_flush(self.worker.db.connection(), force=True)


class OnHeartbeat(MaintenanceUnit):
    """A duty run every ``HEARTBEAT_SECONDS``."""

    def interval(self) -> float:
        return self.worker.heartbeat_seconds


class LeaseHeartbeat(OnHeartbeat):
    def run_once(self) -> None:
        held = self.worker.held
        now = time.monotonic()
        # a job past its timeout is not extended: its lease runs out even if the dispatcher
        # has not recorded the timeout yet (timeouts.py)
        jobs = [job for job in held.values() if job.deadline is None or job.deadline > now]
        if not jobs:
            return
        kept, abort_requested = operations.heartbeat(self.worker.db.connection(), jobs)
        mark_aborted(self.worker, abort_requested)  # how a worker that does not LISTEN learns
        for job in jobs:
            if job.id not in kept and job.id in held:
                logger.warning("lease of job %s #%s was lost (rescued elsewhere)", job.name, job.id)


class RegistryTouch(OnHeartbeat):
    def run_once(self) -> None:
        worker = self.worker
        operations.touch_worker(
            worker.db.connection(),
            worker.id,
            # a worker missing this many heartbeats (or one lease) is shown as gone
            forget_seconds=max(worker.lease_seconds, 5 * worker.heartbeat_seconds),
        )


class Rescuer(MaintenanceUnit):
    def first_delay(self) -> float:
        return 0.0  # at start: picks up what a crashed predecessor left

    def interval(self) -> float:
        # jittered so that workers started together do not rescue together
        return self.worker.rescue_interval * random.uniform(0.8, 1.2)

    def run_once(self) -> None:
        worker = self.worker
        connection = worker.db.connection()
        rescued = operations.rescue(connection)
        if rescued.requeued or rescued.dead_lettered:
            logger.warning(
                "rescued %d job(s) with expired leases (%d requeued, %d dead-lettered)",
                rescued.requeued + rescued.dead_lettered,
                rescued.requeued,
                rescued.dead_lettered,
            )
        if rescued.returned_unstarted:
            logger.warning(
                "gave back %d held job(s) whose worker died before they started (attempt not "
                "spent)",
                rescued.returned_unstarted,
            )
        # always: jobs that keep their result are retained whatever KEEP_SUCCEEDED_SECONDS says
        operations.prune_succeeded(connection, worker.keep_succeeded, worker.keep_results)


def units_for(worker) -> list[MaintenanceUnit]:
    """The dispatcher's units, in the order they run within a turn (the timeout watch is
    ``worker.timeouts``, see ``timeouts.py``)."""
    return [
        worker.timeouts,
        MetricsFlush(worker),
        LeaseHeartbeat(worker),
        RegistryTouch(worker),
        Rescuer(worker),
    ]
