"""The async executor: one event loop, in one thread per worker, that awaits ``async def`` jobs.

The dispatcher hands it a job with ``submit()``; the job runs as an asyncio task on the loop,
at most ``async_concurrency`` at once (the dispatcher claims for that many), and its outcome
goes to the dispatcher on the events queue exactly as an executor thread's does
(``Succeeded``/``Failed``/``HandBack``), so fencing, retries, dead letters, acknowledgements and
metrics are the sync jobs' own.

Django's async ORM runs each query through ``sync_to_async(thread_sensitive=True)``: in a worker
(no ``async_to_sync`` around the loop) that is asgiref's one process-wide sync thread, so every
async job of the worker shares that thread's connections. They get an executor's hygiene there
(``ExecutorConnections``): made fit before each job, checked after it, and a transaction found
open after a job is rolled back and charged to that job. See ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from asgiref.sync import sync_to_async

from .. import registry, signals
from ..conf import get_config
from ..context import reset_current_job, set_current_job
from ..operations import ClaimedJob
from ..payload import dump_result
from .connections import ExecutorConnections
from .outcomes import Failed, HandBack, Succeeded, send

logger = logging.getLogger("django_pgjobs.worker")

TICK_SECONDS = 0.5


class AsyncExecutor:
    def __init__(self, worker) -> None:
        self.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        # job id -> (job, task) of the jobs running now: written on the loop thread; the
        # dispatcher reads it (a plain dict read) to find a running job.
        self.running: dict[int, tuple[ClaimedJob, asyncio.Task]] = {}
        self.cancelled: dict[int, BaseException] = {}  # job id -> the error to fail it with
        self.submitted: dict[int, ClaimedJob] = {}  # handed over, task not created yet
        self._arrived: list = []  # (job, definition) for the loop's next _start_tasks()
        self._lock = threading.Lock()  # submitted: taken by the loop or by take_unstarted()
        self.orm: ExecutorConnections | None = None  # lives on asgiref's sync thread
        self.last_tick = time.monotonic()  # the loop's last sign of life (read by the dispatcher)
        self.max_result_bytes = get_config().MAX_PAYLOAD_BYTES  # kept results: as arguments
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
        entry = self.running.get(job.id)
        if entry is None or entry[0] is not job:
            return False
        self.cancelled[job.id] = error
        self.loop.call_soon_threadsafe(entry[1].cancel)
        return True

    def backend_pids(self) -> dict[str, list[int]]:
        """The server processes of the async jobs' ORM connections (when any job runs)."""
        if self.orm is None or not self.running:
            return {}
        return self.orm.backend_pids()

    def close(self) -> None:
        """Cancel what still runs and stop the loop (its thread then exits)."""
        if self.loop is None:
            return

        def stop() -> None:
            for _, task in list(self.running.values()):
                task.cancel()
            self.loop.call_soon(self.loop.stop)

        try:
            self.loop.call_soon_threadsafe(stop)
        except RuntimeError:  # already closed
            pass

    # -- the loop thread ------------------------------------------------------------------------

    def _run_loop(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
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
            task = self.loop.create_task(self._execute(job, definition), name=f"pgjobs-{job.id}")
            self.running[job.id] = (job, task)

    async def _execute(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        try:
            # Two trips to the ORM thread around the job, skipped when it holds no connection
            # (a job that never used the ORM) and nothing listens to job_started.
            if self.orm is None or self._orm_open() or self._started_heard():
                await sync_to_async(self._before_job, thread_sensitive=True)(job)
            else:
                self.orm.stale_connection_failed = False
            result = await self._await_job(job, definition)
            left_open = None
            if self._orm_open():
                left_open = await sync_to_async(self._after_job, thread_sensitive=True)()
            result = self._settle(result, left_open)
        except BaseException as error:  # noqa: BLE001 - whatever happens, the job gets an outcome
            result = Failed(job, self.cancelled.get(job.id, error), 0.0)
        finally:
            if self.running.get(job.id, (None,))[0] is job:
                del self.running[job.id]
            self.cancelled.pop(job.id, None)
        self.worker.events.put(result)

    async def _await_job(self, job: ClaimedJob, definition: registry.JobDefinition):
        started = time.monotonic()
        if job.timeout is not None:
            job.deadline = started + job.timeout
        token = set_current_job(job)  # this task's own context: current_job() is per task
        try:
            value = await definition.func(*job.args, **job.kwargs)
            if job.keep_result:  # not JSON: a failed attempt, never a success without it
                result = dump_result(value, self.max_result_bytes)
                return Succeeded(job, time.monotonic() - started, result=result)
            return Succeeded(job, time.monotonic() - started)
        except asyncio.CancelledError as error:
            return Failed(job, self.cancelled.get(job.id, error), time.monotonic() - started)
        except BaseException as error:  # noqa: B036 - SystemExit from a job is a failure, too
            return Failed(job, error, time.monotonic() - started)
        finally:
            job.deadline = None  # returned: no longer watched
            reset_current_job(token)

    def _settle(self, result, left_open):
        # (a connection found dead at a job's first query costs no attempt, as for a sync job;
        # only told apart when no other async job was running)
        alone = len(self.running) <= 1
        if isinstance(result, Failed) and alone and self.orm.stale_connection_failed:
            return HandBack(result.job, result.error)
        if left_open is not None and isinstance(result, Succeeded):
            return Failed(result.job, left_open, result.duration)
        return result

    def _orm_open(self) -> bool:
        """The ORM thread has a connection open (a plain read of its wrappers)."""
        return any(wrapper.connection is not None for wrapper in self.orm.wrappers)

    def _started_heard(self) -> bool:
        return signals.job_started.has_listeners(self.worker.sender)

    # -- on asgiref's sync thread (where the async ORM runs) -------------------------------------

    def _before_job(self, job: ClaimedJob) -> None:
        """Close what is unusable (a query of another job in between reconnects on its own:
        connections are in autocommit between queries), and send ``job_started`` here, where
        its receivers may use the ORM as they do on an executor thread."""
        if self.orm is None:
            self.orm = ExecutorConnections()
            self.orm.observing().__enter__()  # for the life of the thread
        self.orm.before_job(job)
        send(signals.job_started, self.worker.sender, job=job)

    def _after_job(self):
        """A transaction open now, between two queries of the jobs, was left open by a job:
        rolled back, charged to the job that just returned."""
        return self.orm.after_job()
