"""The async executor: one event loop, in one thread per worker, that awaits ``async def`` jobs.

The dispatcher hands it a job with ``submit()``; the job runs as an asyncio task on the loop,
at most ``async_concurrency`` at once (the dispatcher claims for that many), and its outcome
goes to the dispatcher on the events queue exactly as an executor thread's does
(``Succeeded``/``Failed``/``HandBack``), so fencing, retries, dead letters, acknowledgements and
metrics are the sync jobs' own.

Each running job holds an ORM lane (``lanes.py``) from its start to its end: its async ORM
queries (and whatever it runs through ``sync_to_async``) run on the lane's thread, on that
thread's own connections, which get an executor thread's hygiene around the job
(``ExecutorConnections``): made fit before it, checked after it, a transaction found open after
it rolled back and charged to it. No other job's queries, start or check touch them meanwhile.
What a job runs on the loop's default executor (``asyncio.to_thread``,
``sync_to_async(thread_sensitive=False)``, ``run_in_executor(None, ...)``) gets the same hygiene
per call (``async_pool.py``). A job cancelled (timeout, abort) that keeps running is given up on
by the dispatcher (``timeouts.py``); its lane then serves no other job. See
``docs/explanation/worker.md``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from .. import registry, signals, tracing
from ..context import reset_current_job, set_current_job
from ..operations import ClaimedJob
from ..payload import dump_result
from .async_pool import JobCallPool
from .lanes import Lane, LanePool, bind, unbind
from .outcomes import Failed, HandBack, Inbox, Succeeded, TransactionLeftOpen, send

logger = logging.getLogger("django_pgjobs.worker")

TICK_SECONDS = 0.5


class AsyncExecutor:
    def __init__(self, inbox: Inbox, sender: type, max_result_bytes: int) -> None:
        self.inbox = inbox  # outcomes go there
        self.sender = sender  # of the signals sent
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        # attempt (``attempt_of``) -> (job, task) of the jobs running now: written on the loop
        # thread; the dispatcher reads it (a plain dict read) to find a running job. By attempt,
        # not by job id: a job's retry may start here while its cancelled attempt runs on.
        self.running: dict[tuple, tuple[ClaimedJob, asyncio.Task]] = {}
        # attempt -> (job, the error to fail it with, when its task was cancelled): added by the
        # dispatcher, removed by the loop when the task ends
        self.cancelled: dict[tuple, tuple[ClaimedJob, BaseException, float]] = {}
        self.submitted: dict[int, ClaimedJob] = {}  # handed over, task not created yet
        self._arrived: list = []  # (job, definition) for the loop's next _start_tasks()
        self._lock = threading.Lock()  # submitted (loop, take_unstarted), left_open_in_pool
        self.lanes = LanePool()  # the running jobs' ORM lanes, and the idle ones
        # attempt -> the transaction a call of it on the default executor left open: written
        # by a pool thread while the job runs, taken when it ends (both under _lock)
        self.left_open_in_pool: dict[tuple, TransactionLeftOpen] = {}
        self.last_tick = time.monotonic()  # the loop's last sign of life (read by the dispatcher)
        self.max_result_bytes = max_result_bytes  # kept results: as arguments
        self._ready = threading.Event()

    @property
    def started(self) -> bool:
        return self.thread is not None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run_loop, name="pgjobs-async", daemon=True)
        self.thread.start()
        self._ready.wait()

    def submit(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        """(Dispatcher.) Run ``job`` on the loop."""
        if self.thread is None:
            self.start()
        with self._lock:
            self.submitted[job.id] = job
            self._arrived.append((job, definition))
            first = len(self._arrived) == 1
        if first:  # one wake-up of the loop for the jobs of a claim
            self.loop.call_soon_threadsafe(self._start_tasks)

    def take_unstarted(self) -> list[ClaimedJob]:
        """(Dispatcher.) The jobs handed over whose task the loop has not created yet (a busy or
        blocked loop): they will not start."""
        with self._lock:
            unstarted = list(self.submitted.values())
            self.submitted.clear()
        return unstarted

    def cancel(self, job: ClaimedJob, error: BaseException) -> bool:
        """(Any thread.) Cancel ``job`` if it is a running async job: True when its task was
        asked to stop; its outcome is then ``Failed(job, error, ...)`` (unless it finished
        before the cancellation reached it: then its own outcome)."""
        entry = self.running.get(attempt_of(job))
        if entry is None or entry[0] is not job:
            return False
        if self.cancelled.get(attempt_of(job), (None,))[0] is not job:  # else cancelled already
            self.cancelled[attempt_of(job)] = (job, error, time.monotonic())
        self.loop.call_soon_threadsafe(entry[1].cancel)
        return True

    def still_cancelled(self, older_than: float) -> list[tuple]:
        """(Dispatcher.) ``(job, error, task)`` of the jobs whose task was cancelled before
        ``older_than`` (monotonic) and still runs: it swallowed its cancellation, or waits on a
        blocking call."""
        still = []
        for attempt, (job, error, at) in list(self.cancelled.items()):
            job_and_task = self.running.get(attempt, (None, None))
            if job_and_task[0] is not job:
                self.cancelled.pop(attempt, None)  # ended just before its cancellation
            elif at < older_than:
                still.append((job, error, job_and_task[1]))
        return still

    def tasks_left(self, given_up: list[asyncio.Task]) -> int:
        """(Dispatcher.) How many tasks still run: the running jobs' and those given up on
        (whose retry may have taken their job's place in ``running``)."""
        tasks = {task for _, task in list(self.running.values())}
        tasks.update(task for task in given_up if not task.done())
        return len(tasks)

    def lane_of(self, job: ClaimedJob) -> Lane | None:
        """(Any thread.) The ORM lane ``job`` holds while it runs."""
        return next((lane for lane in list(self.lanes.lanes) if lane.job is job), None)

    def backend_pids(self, held: dict[int, ClaimedJob]) -> dict[str, list[int]]:
        """The server processes of the lanes of the running async jobs still held, by alias."""
        by_alias: dict[str, list[int]] = {}
        for lane in list(self.lanes.lanes):
            job = lane.job
            if job is not None and held.get(job.id) is job:
                for alias, pids in lane.backend_pids().items():
                    by_alias.setdefault(alias, []).extend(pids)
        return by_alias

    def close(self) -> None:
        """Cancel what still runs, end the lanes (closing their connections) and stop the loop
        (its thread then exits)."""
        if self.loop is None:
            return

        def stop() -> None:
            for _, task in list(self.running.values()):
                task.cancel()
            self.lanes.close()
            self.loop.call_soon(self.loop.stop)

        try:
            self.loop.call_soon_threadsafe(stop)
        except RuntimeError:  # already closed
            pass

    # -- the loop thread ------------------------------------------------------------------------

    def _run_loop(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        # shut down by loop.close(): its threads close their connections
        self.loop.set_default_executor(JobCallPool(self._charge_left_open))
        self._tick()
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _tick(self) -> None:
        """Every ``TICK_SECONDS``: a loop that stops ticking is blocked by a job (``timeouts``)."""
        self.last_tick = time.monotonic()
        self.loop.call_later(TICK_SECONDS, self._tick)

    def _start_tasks(self) -> None:
        with self._lock:
            arrived, self._arrived = self._arrived, []
            starting = []
            for job, definition in arrived:
                if self.submitted.get(job.id) is job:  # else taken back (take_unstarted)
                    del self.submitted[job.id]
                    starting.append((job, definition))
        for job, definition in starting:
            lane = self.lanes.take(job)
            task = self.loop.create_task(
                self._execute(job, definition, lane), name=f"pgjobs-{job.id}"
            )
            self.running[attempt_of(job)] = (job, task)

    async def _execute(
        self, job: ClaimedJob, definition: registry.JobDefinition, lane: Lane
    ) -> None:
        key = bind(lane)  # this task's ORM calls, and its child tasks', go to its lane
        checked = False  # the lane's connections were checked after the job
        try:
            await self._before_job(job, lane)
            result = await self.await_job(job, definition)
            left_open = None
            if lane.orm_open() or not lane.idle():  # (a call still running may open one)
                left_open = await self.loop.run_in_executor(lane, lane.after_job)
            checked = True
            result = self._settle(result, left_open or self._take_left_open(job), lane)
        except BaseException as error:  # noqa: BLE001 - whatever happens, the job gets an outcome
            result = Failed(job, self._cancellation(job, error), 0.0)
        finally:
            unbind(key)
            if self.running.get(attempt_of(job), (None,))[0] is job:
                del self.running[attempt_of(job)]
            if self.cancelled.get(attempt_of(job), (None,))[0] is job:
                self.cancelled.pop(attempt_of(job), None)
            self._take_left_open(job)  # after `running`: no charge for this attempt comes later
            # a lane whose check did not run (cancelled meanwhile), or that still runs a call of
            # this job, may hold a transaction: it serves no other job
            self.lanes.give_back(lane, reusable=checked and lane.idle())
        self.inbox.put(result)

    async def _before_job(self, job: ClaimedJob, lane: Lane) -> None:
        """Close what is unusable on the lane, and send ``job_started`` there, where its
        receivers may use the ORM as they do on an executor thread. A trip to the lane's thread
        only when it holds a connection or someone listens: else nothing is open to check."""
        if lane.orm_open() or signals.job_started.has_listeners(self.sender):
            await self.loop.run_in_executor(lane, self._prepare_lane, job, lane)
        elif lane.orm is not None:
            lane.orm.before_job(job)  # no connection open: resets its notes, runs no statement

    def _prepare_lane(self, job: ClaimedJob, lane: Lane) -> None:
        lane.orm.before_job(job)
        send(signals.job_started, self.sender, job=job)

    def _cancellation(self, job: ClaimedJob, error: BaseException) -> BaseException:
        cancelled = self.cancelled.get(attempt_of(job))
        return cancelled[1] if cancelled is not None and cancelled[0] is job else error

    async def await_job(self, job: ClaimedJob, definition: registry.JobDefinition):
        """Await one async job as the worker does (no lane: its ORM calls go where the caller
        sends them); its outcome."""
        started = time.monotonic()
        if job.timeout is not None:
            job.deadline = started + job.timeout
        token = set_current_job(job)  # this task's own context: current_job() is per task
        span = tracing.attempt_started(job)  # None without OpenTelemetry
        try:
            job.raise_if_aborted()  # aborted before it started: it never starts
            value = await definition.func(*job.args, **job.kwargs)
            if job.keep_result:  # not JSON: a failed attempt, never a success without it
                result = dump_result(value, self.max_result_bytes)
                return Succeeded(job, time.monotonic() - started, result=result)
            return Succeeded(job, time.monotonic() - started)
        except asyncio.CancelledError as error:
            return Failed(job, self._cancellation(job, error), time.monotonic() - started)
        except BaseException as error:  # noqa: B036 - SystemExit from a job is a failure, too
            return Failed(job, error, time.monotonic() - started)
        finally:
            job.deadline = None  # returned: no longer watched
            reset_current_job(token)
            tracing.leave(span)

    def _charge_left_open(self, job: ClaimedJob, error: TransactionLeftOpen) -> None:
        """(A pool thread.) A call ``job`` ran on the default executor left a transaction open
        (rolled back): its attempt fails with ``error``, unless it has ended already."""
        with self._lock:
            if self.running.get(attempt_of(job), (None,))[0] is job:
                self.left_open_in_pool[attempt_of(job)] = error
                return
        logger.warning(
            "job %s had ended when a call it left running on the event loop's default "
            "executor returned inside a transaction: rolled back, not charged to it",
            job.id,
        )

    def _take_left_open(self, job: ClaimedJob) -> TransactionLeftOpen | None:
        with self._lock:
            return self.left_open_in_pool.pop(attempt_of(job), None)

    def _settle(self, result, left_open, lane: Lane):
        # a connection found dead at a job's first query costs no attempt, as for a sync job
        if isinstance(result, Failed) and lane.orm is not None and lane.orm.stale_connection_failed:
            return HandBack(result.job, result.error)
        if left_open is not None and isinstance(result, Succeeded):
            return Failed(result.job, left_open, result.duration)
        return result


def attempt_of(job: ClaimedJob) -> tuple:
    """A job's attempt on this worker: its claim (a retry is claimed with another token)."""
    return (job.id, job.claim_token)
