"""The dispatcher's steps once a stop is requested.

Hand back the claimed jobs no executor started (no attempt spent); let running jobs finish for
``shutdown_grace``; then end their statements (``pg_terminate_backend``: a job left running would
keep its locks after the worker exits) and record them as failed attempts. With the database
unavailable nothing can be recorded: the jobs held go back when their lease expires.
Dispatcher thread only.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connections

from .. import operations
from .outcomes import one_line

logger = logging.getLogger("django_pgjobs.worker")


class Shutdown:
    def __init__(self, worker) -> None:
        self.worker = worker
        self.abandoned = False  # the grace period ran out with jobs still running

    def release_unstarted(self) -> None:
        worker = self.worker
        unstarted = worker.executors.take_unstarted()
        if not unstarted:
            return
        db = worker.db
        released = db.with_retries(lambda: operations.release_jobs(db.connection(), unstarted))
        released = released or set()
        for job in unstarted:
            worker.forget(job)
        worker.stats.released += len(released)
        logger.info("handed back %d claimed job(s) that had not started", len(released))

    def abandon_running(self) -> None:
        """Grace period over: end the statements of the jobs still running (their locks go at
        once) and record those jobs as failed attempts."""
        worker = self.worker
        self.abandoned = True
        self.end_abandoned_statements()
        worker.acks.flush()  # finished jobs are not running: acknowledge them first
        error = RuntimeError(
            f"worker {worker.id} shut down before the job finished "
            f"(shutdown grace {worker.shutdown_grace:g}s)"
        )
        for job in list(worker.held.values()):
            worker.failures.record_failure(job, error)
        logger.warning("shutdown grace expired; gave up on running job(s)")

    def end_abandoned_statements(self) -> None:
        """Terminate the server processes of the executors still running a job."""
        worker = self.worker
        for alias, pids in worker.executors.running_backends(worker.held).items():
            try:
                connection = worker.db.connection() if alias == worker.alias else connections[alias]
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
        if self.worker.held:
            logger.warning(
                "database unavailable at shutdown; %d claimed job(s) go back to the queue when "
                "their lease expires",
                len(self.worker.held),
            )

    def say_what_is_left_behind(self) -> bool:
        """Log the jobs the worker exits without waiting for: threads stuck in timed-out jobs,
        async tasks still running (given up on at their timeout or abort, or at the grace's end).
        True when there are any."""
        worker = self.worker
        threads = sum(1 for executor in worker.timeouts.stuck if executor.thread.is_alive())
        tasks = worker.executors.async_executor.tasks_left(worker.timeouts.stuck_tasks)
        if threads or tasks:
            logger.warning(
                "exiting without waiting for %d executor thread(s) stuck in timed-out jobs and "
                "%d async task(s) still running (cancelled, given up on): they end with the "
                "process",
                threads,
                tasks,
            )
        return bool(threads or tasks)

    def finish(self, database_down: bool = False) -> None:
        """Last acknowledgements and counts, leave the registry, let the threads go."""
        worker = self.worker
        worker.stop.requested.set()
        if not database_down:
            try:
                worker.acks.flush()
                worker.metrics.maybe_flush(worker.db.connection(), force=True)
                operations.unregister_worker(worker.db.connection(), worker.id)
            except DatabaseError as error:
                logger.warning("could not finish cleanly: %s", one_line(error))
        left_behind = self.say_what_is_left_behind()
        worker.executors.close()
        # Idle executors exit at once; busy ones (jobs given up on after the grace period) are
        # daemon threads: wait for them briefly, in total, not per thread.
        busy = worker.held or self.abandoned or left_behind
        deadline = time.monotonic() + (0.5 if busy else 5.0)
        for thread in worker.threads():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        worker.db.close()
