"""Timeouts: the dispatcher's watch over jobs running past their time.

A job gets its deadline when it starts (its executor sets ``job.deadline``). Once past it, the
dispatcher records the failed attempt at once (``JobTimeout``; retried or dead-lettered by the
failure policy, fenced by the claim token), so the heartbeat no longer extends its lease and
whatever the job does later is fenced out; its late outcome is dropped. An async job's task is
cancelled. A sync thread cannot be stopped: its running statement is cancelled
(``pg_cancel_backend``), the thread stops counting as a slot (a new executor takes its place and
the old one exits when the job returns), and when ``MAX_STUCK_THREADS`` such threads are still
running the worker stops claiming, hands back what it holds and exits with status
``STUCK_EXIT_CODE`` for its supervisor to restart it. Dispatcher thread only.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback

from django.db import DatabaseError, connections

from .. import operations
from ..conf import get_config
from ..errors import JobTimeout
from ..operations import ClaimedJob
from .maintenance import MaintenanceUnit
from .outcomes import one_line

logger = logging.getLogger("django_pgjobs.worker")

STUCK_EXIT_CODE = 3
# A cancelled async job still running this long, while the event loop has not ticked for as
# long, blocks the loop (time.sleep, a sync call): every async job waits; count it as stuck.
BLOCKED_LOOP_SECONDS = 5.0
WATCH_SECONDS = 0.2  # how often deadlines are checked while jobs with a timeout are held
IDLE_WATCH_SECONDS = 1.0


class Timeouts(MaintenanceUnit):
    def __init__(self, worker) -> None:
        self.dropping: dict[int, ClaimedJob] = {}  # timed out: their late outcome is dropped
        self.stuck: list = []  # the executors retired with a timed-out sync job
        self.cancelled: dict[int, tuple[ClaimedJob, float]] = {}  # async: (job, when)
        self.loop_blocked = False
        self.max_stuck = get_config().MAX_STUCK_THREADS
        super().__init__(worker)

    def interval(self) -> float:
        if any(job.timeout is not None for job in self.worker.held.values()):
            return WATCH_SECONDS
        return IDLE_WATCH_SECONDS

    def run_once(self) -> None:
        now = time.monotonic()
        for job in list(self.worker.held.values()):
            if job.deadline is not None and now >= job.deadline:
                self.expire(job)
        self.stuck = [executor for executor in self.stuck if executor.thread.is_alive()]
        if self.cancelled:
            self._watch_loop(now)
        worker = self.worker
        if worker.stop.requested.is_set():
            return
        if len(self.stuck) >= self.max_stuck:
            logger.error(
                "%d executor thread(s) are stuck in timed-out jobs (MAX_STUCK_THREADS=%d): "
                "stopping; the worker exits with status %d for its supervisor to restart it",
                len(self.stuck),
                self.max_stuck,
                STUCK_EXIT_CODE,
            )
        elif self.loop_blocked:
            logger.error(
                "the event loop of the async jobs is blocked by a timed-out job (a blocking "
                "call inside an async def): stopping; the worker exits with status %d for its "
                "supervisor to restart it",
                STUCK_EXIT_CODE,
            )
        else:
            return
        worker.exit_code = STUCK_EXIT_CODE
        worker.request_stop()

    def _watch_loop(self, now: float) -> None:
        runner = self.worker.executors.async_executor
        for job_id, (job, at) in list(self.cancelled.items()):
            if runner.running.get(job_id, (None,))[0] is not job:
                del self.cancelled[job_id]  # it ended
            elif now - at > BLOCKED_LOOP_SECONDS and now - runner.last_tick > BLOCKED_LOOP_SECONDS:
                self.loop_blocked = True

    def outcome_dropped(self, item) -> bool:
        """True for the late outcome of a job already recorded as timed out."""
        if not self.dropping:
            return False
        job = getattr(item, "job", None)
        if job is not None and self.dropping.get(job.id) is job:
            del self.dropping[job.id]
            return True
        return False

    def expire(self, job: ClaimedJob) -> None:
        worker = self.worker
        executors = worker.executors
        executor = None if job.id in executors.async_executor.running else executors.retire(job)
        where = _stack_of(executor.thread) if executor is not None else ""
        error = JobTimeout(f"timed out after {job.timeout:g} s{where}")
        self.dropping[job.id] = job
        logger.warning("job %s #%s timed out after %gs", job.name, job.id, job.timeout)
        worker.failures.record_failure(job, error)  # fenced; stops its heartbeat
        if executor is None:
            if executors.cancel_async(job, error):
                self.cancelled[job.id] = (job, time.monotonic())
            return
        self.stuck.append(executor)
        self._cancel_statements(executor.backend_pids())

    def _cancel_statements(self, by_alias: dict[str, list[int]]) -> None:
        worker = self.worker
        for alias, pids in by_alias.items():
            try:
                connection = worker.db.connection() if alias == worker.alias else connections[alias]
                operations.cancel_backends(connection, pids)
            except DatabaseError as error:
                logger.warning("could not cancel a timed-out job's statement: %s", one_line(error))


def _stack_of(thread) -> str:
    """Where the stuck thread is, for the error entry (its own traceback never comes)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return ""
    stack = "".join(traceback.format_stack(frame)[-8:])
    return f"; it was running:\n{stack.rstrip()}"
