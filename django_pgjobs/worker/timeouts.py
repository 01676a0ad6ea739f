"""Timeouts: the dispatcher's watch over jobs running past their time, and over the jobs it gave
up on that still run.

A job gets its deadline when it starts (its executor sets ``job.deadline``). Once past it, the
dispatcher records the failed attempt at once (``JobTimeout``; retried or dead-lettered by the
failure policy, fenced by the claim token), so the heartbeat no longer extends its lease and
whatever the job does later is fenced out; its late outcome is dropped. An async job's task is
cancelled and its lane's running statement too. A sync thread cannot be stopped: its running
statement is cancelled (``pg_cancel_backend``), the thread stops counting as a slot (a new
executor takes its place and the old one exits when the job returns). An async task cancelled (at
its timeout or by an abort) that still runs ``STUCK_TASK_SECONDS`` later ignores its cancellation
(it caught ``CancelledError``, or waits on a blocking call): the worker gives up on it as on a
stuck thread, records its attempt as failed if it was not already, and terminates its lane's
connections (``pg_terminate_backend``), so its ORM writes stop and its lane serves no other job.
When ``MAX_STUCK_THREADS`` such threads and tasks are still running, the worker stops claiming,
hands back what it holds and exits with status ``STUCK_EXIT_CODE`` for its supervisor to restart
it. Dispatcher thread only.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import traceback

from django.db import DatabaseError, connections

from .. import operations
from ..errors import JobTimeout
from ..operations import ClaimedJob
from .async_executor import attempt_of
from .executors import ExecutorPool
from .failures import FailurePolicy
from .faults import DispatcherDatabase
from .maintenance import MaintenanceUnit
from .outcomes import one_line
from .state import DispatcherState
from .stopping import StopState

logger = logging.getLogger("django_pgjobs.worker")

STUCK_EXIT_CODE = 3
# A cancelled async task still running this long ignores its cancellation: given up on, stuck.
STUCK_TASK_SECONDS = 1.0
#: By then a cancelled task that still runs has been given up on (its sessions ended): the
#: check runs at every turn of the dispatcher, a fraction of a second apart.
GIVEN_UP_WITHIN_SECONDS = STUCK_TASK_SECONDS + 1.0
# A cancelled async job still running this long, while the event loop has not ticked for as
# long, blocks the loop (time.sleep, a sync call): every async job waits; the worker stops.
BLOCKED_LOOP_SECONDS = 5.0
WATCH_SECONDS = 0.2  # how often deadlines are checked while jobs with a timeout are held
IDLE_WATCH_SECONDS = 1.0


class Timeouts(MaintenanceUnit):
    """The timeout watch, a maintenance unit. ``exit_code`` is ``STUCK_EXIT_CODE`` once it has
    stopped the worker for stuck threads or a blocked event loop."""

    def __init__(
        self,
        db: DispatcherDatabase,
        state: DispatcherState,
        executors: ExecutorPool,
        failures: FailurePolicy,
        stop: StopState,
        max_stuck: int,
    ) -> None:
        self.db = db
        self.state = state
        self.executors = executors
        self.failures = failures
        self.stop = stop
        self.max_stuck = max_stuck  # MAX_STUCK_THREADS
        self.exit_code = 0
        # (id, claim token) -> job: given up on, their late outcome is dropped (by claim: a
        # job's retry may run on this worker while its timed-out attempt still does)
        self.dropping: dict[tuple, ClaimedJob] = {}
        self.stuck: list = []  # the executors retired with a timed-out sync job
        self.stuck_tasks: list[asyncio.Task] = []  # async jobs given up on that still run
        self.loop_blocked = False
        super().__init__()

    def interval(self) -> float:
        if self.executors.async_executor.cancelled or any(
            job.timeout is not None for job in self.state.held.values()
        ):
            return WATCH_SECONDS
        return IDLE_WATCH_SECONDS

    def run_once(self) -> int:
        """Returns how many jobs it found past their deadline."""
        now = time.monotonic()
        expired = [
            job
            for job in list(self.state.held.values())
            if job.deadline is not None and now >= job.deadline
        ]
        for job in expired:
            self.expire(job)
        self.stuck = [executor for executor in self.stuck if executor.thread.is_alive()]
        self._watch_cancelled(now)
        if not self.stop.requested.is_set():
            self._stop_if_stuck()
        return len(expired)

    def _stop_if_stuck(self) -> None:
        if len(self.stuck) + len(self.stuck_tasks) >= self.max_stuck:
            logger.error(
                "%d executor thread(s) are stuck in timed-out jobs and %d async task(s) ignore "
                "their cancellation (MAX_STUCK_THREADS=%d): stopping; the worker exits with "
                "status %d for its supervisor to restart it",
                len(self.stuck),
                len(self.stuck_tasks),
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
        self.exit_code = STUCK_EXIT_CODE
        self.stop.request()  # (the dispatcher's own thread: it sees the request next)

    def _watch_cancelled(self, now: float) -> None:
        runner = self.executors.async_executor
        self.stuck_tasks = [task for task in self.stuck_tasks if not task.done()]
        if not runner.cancelled:
            return
        for job, error, task in runner.still_cancelled(older_than=now - STUCK_TASK_SECONDS):
            lane = runner.lane_of(job)
            if lane is not None and not lane.retired:
                self._give_up_on_task(job, error, task, lane)
        # still running this long, and the loop has not ticked for as long: a blocking call in
        # an async def holds the loop, and every async job waits
        if (
            runner.still_cancelled(older_than=now - BLOCKED_LOOP_SECONDS)
            and now - runner.last_tick > BLOCKED_LOOP_SECONDS
        ):
            self.loop_blocked = True

    def _give_up_on_task(self, job: ClaimedJob, error: BaseException, task, lane) -> None:
        """A cancelled task that goes on running: its lane serves no other job, its ORM
        connections end (its transaction rolls back, its later queries fail), and an attempt not
        recorded yet (an abort) is recorded as failed now; it counts as stuck."""
        if self.state.holds(job):  # first: a database error here repeats it all
            self.dropping[attempt_of(job)] = job
            self.failures.record_failure(job, error)
        lane.retired = True
        self.stuck_tasks.append(task)
        logger.error(
            "job %s #%s still runs %gs after its task was cancelled (it caught "
            "asyncio.CancelledError, or waits on a blocking call): given up on, counted as "
            "stuck; its ORM connections are terminated",
            job.name,
            job.id,
            STUCK_TASK_SECONDS,
        )
        self._end_sessions(lane.backend_pids(), operations.terminate_backends)

    def outcome_dropped(self, item) -> bool:
        """True for the late outcome of a job already recorded as timed out."""
        if not self.dropping:
            return False
        job = getattr(item, "job", None)
        if job is not None and self.dropping.get(attempt_of(job)) is job:
            del self.dropping[attempt_of(job)]
            return True
        return False

    def expire(self, job: ClaimedJob) -> None:
        executors = self.executors
        running_async = attempt_of(job) in executors.async_executor.running
        executor = None if running_async else executors.retire(job)
        where = _stack_of(executor.thread) if executor is not None else ""
        error = JobTimeout(f"timed out after {job.timeout:g} s{where}")
        self.dropping[attempt_of(job)] = job
        logger.warning("job %s #%s timed out after %gs", job.name, job.id, job.timeout)
        # fenced; stops its heartbeat. An async job's retry is not due before the task is given
        # up on: a call it awaits in a thread (sync_to_async) runs on until it returns or its
        # session is ended, and its writes must not meet its own retry's.
        self.failures.record_failure(
            job, error, retry_at_least=GIVEN_UP_WITHIN_SECONDS if running_async else 0.0
        )
        if executor is None:
            if executors.cancel_async(job, error):
                lane = executors.async_executor.lane_of(job)
                if lane is not None:  # a query the task awaits runs on in the lane's thread
                    self._end_sessions(lane.backend_pids(), operations.cancel_backends)
            return
        self.stuck.append(executor)
        self._end_sessions(executor.backend_pids(), operations.cancel_backends)

    def _end_sessions(self, by_alias: dict[str, list[int]], end) -> None:
        """Cancel the statements (``operations.cancel_backends``) or terminate the sessions
        (``operations.terminate_backends``) of a job given up on."""
        for alias, pids in by_alias.items():
            try:
                connection = self.db.connection() if alias == self.db.alias else connections[alias]
                end(connection, pids)
            except DatabaseError as error:
                logger.warning("could not end a timed-out job's statement: %s", one_line(error))


def _stack_of(thread) -> str:
    """Where the stuck thread is, for the error entry (its own traceback never comes)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return ""
    stack = traceback.format_stack(frame)[-8:]
    where = traceback.extract_stack(frame)[-1]
    # A first line complete on its own (the log line and the dead letter's reason show only
    # that), then the stack for the error entry.
    return (
        f", its thread still running at {where.name} ({where.filename}:{where.lineno})\n"
        f"Stack of that thread (most recent call last):\n{''.join(stack).rstrip()}"
    )
