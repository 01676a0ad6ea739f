"""The event loop's default executor: where an async job's ``asyncio.to_thread``,
``sync_to_async(thread_sensitive=False)`` and ``loop.run_in_executor(None, ...)`` calls run.

Those calls bypass the job's ORM lane (``lanes.py``), so without this pool their connections got
no hygiene at all: a connection per pool thread stayed open whatever ``CONN_MAX_AGE`` said, and a
transaction a call left open stayed open on its thread, its writes never committed while the job
was acknowledged as succeeded, and the next call landing on that thread ran inside it. Here every
call gets an executor thread's hygiene (``ExecutorConnections``) on its pool thread: made fit
before it, checked after it (before the awaiting job sees its result), a transaction left open
rolled back and charged to the job that submitted the call. See ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections

from ..context import current_job
from ..operations import ClaimedJob
from .connections import ExecutorConnections
from .outcomes import TransactionLeftOpen

logger = logging.getLogger("django_pgjobs.worker")

_STOP = object()

# asyncio's own default (``ThreadPoolExecutor()``): the same room for blocking calls as before.
# Not scaled to ASYNC_CONCURRENCY: each thread may keep a connection (per CONN_MAX_AGE), on top
# of the running jobs' lanes.
DEFAULT_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)

ChargeLeftOpen = Callable[[ClaimedJob, TransactionLeftOpen], None]


class JobCallPool(ThreadPoolExecutor):
    """Daemon threads ``pgjobs-async-pool-N`` running the loop's default-executor calls, each
    with its connections checked after the call.

    A ``ThreadPoolExecutor`` only because ``loop.set_default_executor`` accepts nothing else:
    ``submit`` and ``shutdown`` are its own. Its threads are daemon threads, unlike a
    ``ThreadPoolExecutor``'s (joined at interpreter exit): a job's call stuck in a blocking call
    must not keep the worker process from exiting.
    """

    def __init__(self, charge: ChargeLeftOpen, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        super().__init__(max_workers=max_workers)
        self.max_workers = max_workers
        self._charge = charge  # (on a pool thread) fail the job that left a transaction open
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one per thread waiting for a call
        self._pool_threads: list[threading.Thread] = []
        self._closed = False
        self._submit_lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        # The submitter runs in the job's task (asyncio.to_thread, sync_to_async and
        # run_in_executor all submit from it), so its job is known here, even for a
        # run_in_executor call, whose function runs without the task's context.
        job = current_job()
        with self._submit_lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future = Future()
            self._calls.put((future, job, fn, args, kwargs))
            idle_thread = self._idle.acquire(blocking=False)
            if not idle_thread and len(self._pool_threads) < self.max_workers:
                self._start_thread()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Each thread closes its connections and ends once the calls before are done (asyncio
        calls this when the loop closes)."""
        with self._submit_lock:
            if self._closed:
                return
            self._closed = True
            while cancel_futures:
                try:
                    item = self._calls.get_nowait()
                except queue.Empty:
                    break
                item[0].cancel()
            for _ in self._pool_threads:
                self._calls.put(_STOP)
        if wait:
            for thread in self._pool_threads:
                thread.join()

    def _start_thread(self) -> None:
        name = f"pgjobs-async-pool-{len(self._pool_threads)}"
        thread = threading.Thread(target=self._serve, name=name, daemon=True)
        thread.start()
        self._pool_threads.append(thread)

    def _serve(self) -> None:
        orm = ExecutorConnections()  # this thread's connections, watched for its life
        try:
            with orm.observing():
                while (item := self._calls.get()) is not _STOP:
                    self._run(orm, *item)
                    self._idle.release()
        finally:
            connections.close_all()  # the server rolls back whatever was left open

    def _run(self, orm: ExecutorConnections, future: Future, job, fn, args, kwargs) -> None:
        if not future.set_running_or_notify_cancel():
            return
        orm.before_job(job)
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            self._check(orm, job)
            future.set_exception(error)
        else:
            self._check(orm, job)  # before the job sees the result: its outcome waits for this
            future.set_result(result)

    def _check(self, orm: ExecutorConnections, job: ClaimedJob | None) -> None:
        left_open = orm.after_job(where="a call the job ran on the event loop's default executor")
        if left_open is None:
            return
        if job is None:
            logger.warning(
                "a call on the event loop's default executor, outside any job, left a "
                "transaction open: rolled back"
            )
            return
        self._charge(job, left_open)
