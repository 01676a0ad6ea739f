"""The dispatcher's steps once a stop is requested.

Hand back the claimed jobs no executor started (no attempt spent); let running jobs finish for
``shutdown_grace``; then end their statements (``pg_terminate_backend``: a job left running would
keep its locks after the worker exits) and record them as failed attempts. With the database
unavailable nothing can be recorded: the jobs held go back when their lease expires.
Dispatcher thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, connections

from .. import operations
from .acks import Acknowledgements
from .executors import ExecutorPool
from .failures import FailurePolicy
from .faults import DispatcherDatabase
from .outcomes import one_line
from .state import DispatcherState
from .stopping import StopState
from .timeouts import Timeouts

logger = logging.getLogger("django_pgjobs.worker")


class Shutdown:
    def __init__(
        self,
        *,
        db: DispatcherDatabase,
        state: DispatcherState,
        stop: StopState,
        executors: ExecutorPool,
        acks: Acknowledgements,
        failures: FailurePolicy,
        timeouts: Timeouts,
        worker_id: str,
    ) -> None:
        self.db = db
        self.state = state
        self.stop = stop
        self.executors = executors
        self.acks = acks
        self.failures = failures
        self.timeouts = timeouts
        self.worker_id = worker_id
        self.abandoned = False  # the grace period ran out with jobs still running

    def release_unstarted(self) -> None:
        unstarted = self.executors.take_unstarted()
        if not unstarted:
            return
        db = self.db
        released = db.with_retries(lambda: operations.release_jobs(db.connection(), unstarted))
        released = released or set()
        for job in unstarted:
            self.state.forget(job)
        self.state.stats.released += len(released)
        logger.info("handed back %d claimed job(s) that had not started", len(released))

    def abandon_running(self) -> None:
        """Grace period over: end the statements of the jobs still running (their locks go at
        once) and record those jobs as failed attempts."""
        self.abandoned = True
        self.end_abandoned_statements()
        self.acks.flush()  # finished jobs are not running: acknowledge them first
        error = RuntimeError(
            f"worker {self.worker_id} shut down before the job finished "
            f"(shutdown grace {self.stop.grace:g}s)"
        )
        for job in list(self.state.held.values()):
            self.failures.record_failure(job, error)
        logger.warning("shutdown grace expired; gave up on running job(s)")

    def end_abandoned_statements(self) -> None:
        """Terminate the server processes of the executors still running a job."""
        for alias, pids in self.executors.running_backends(self.state.held).items():
            try:
                connection = self.db.connection() if alias == self.db.alias else connections[alias]
                ended = operations.terminate_backends(connection, pids)
            except DatabaseError as error:
                logger.warning(
                    "could not end the abandoned jobs' statements on %r: %s",
                    alias,
                    one_line(error),
                )
                continue
            logger.warning("ended %d database session(s) of abandoned job(s) on %r", ended, alias)

    def leave_to_leases(self) -> None:
        """Stopping with the database unavailable: the jobs still held cannot be recorded, their
        leases bring them back (spending the attempt of those that were running)."""
        self.abandoned = True
        if self.state.held:
            logger.warning(
                "database unavailable at shutdown; %d claimed job(s) go back to the queue when "
                "their lease expires",
                len(self.state.held),
            )

    def say_what_is_left_behind(self) -> bool:
        """Log the jobs the worker exits without waiting for: threads stuck in timed-out jobs,
        async tasks still running (given up on at their timeout or abort, or at the grace's end).
        True when there are any."""
        threads = sum(1 for executor in self.timeouts.stuck if executor.thread.is_alive())
        tasks = self.executors.async_executor.tasks_left(self.timeouts.stuck_tasks)
        if threads or tasks:
            logger.warning(
                "exiting without waiting for %d executor thread(s) stuck in timed-out jobs and "
                "%d async task(s) still running (cancelled, given up on): they end with the "
                "process",
                threads,
                tasks,
            )
        return bool(threads or tasks)

    def wind_up(
        self, database_down: bool, threads: Callable[[], list[threading.Thread]], units=()
    ) -> None:
        """The last step: last acknowledgements and counts, leave the registry, let the threads
        (``threads()``, once the executors are told to exit) go, close the outbox relay's
        broker connection (``units``: the maintenance units)."""
        self.stop.requested.set()
        if not database_down:
            try:
                self.acks.flush()
                self.state.metrics.maybe_flush(self.db.connection(), force=True)
                operations.unregister_worker(self.db.connection(), self.worker_id)
            except DatabaseError as error:
                logger.warning("could not finish cleanly: %s", one_line(error))
        left_behind = self.say_what_is_left_behind()
        self.executors.close()
        # Idle executors exit at once; busy ones (jobs given up on after the grace period) are
        # daemon threads: wait for them briefly, in total, not per thread.
        busy = self.state.held or self.abandoned or left_behind
        deadline = time.monotonic() + (0.5 if busy else 5.0)
        for thread in threads():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        from ..outbox.relay import OutboxRelay

        for unit in units:
            if not isinstance(unit, OutboxRelay):  # (the vacuum's close waits for it to end)
                continue
            try:
                unit.close()
            except Exception as error:  # noqa: BLE001 - the worker exits all the same
                logger.warning("could not close the outbox relay: %s", one_line(error))
        self.db.close()
