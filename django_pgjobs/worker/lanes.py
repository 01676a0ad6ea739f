"""ORM lanes: the thread, and so the database connections, of one running async job.

Django's async ORM runs each query through ``sync_to_async(thread_sensitive=True)``, and without
``async_to_sync`` around the worker's event loop asgiref sends every such call of the process to
one shared thread: every async job would run on one connection, and one job's
``set_autocommit(False)`` or its hygiene check would reach into the others' transactions. Django's
ASGI handler keeps requests apart by giving each one its own thread-sensitive context, hence its
own thread. A worker does the same per job, with threads kept warm: a job holds a ``Lane`` from its
start to its end, its thread-sensitive calls run on the lane's thread (asgiref's per-context
executor, ``bind``), and the lane gets an executor thread's hygiene around the job
(``ExecutorConnections``). Lanes are reused last-in first-out, so the fewest connections stay
open; a lane's thread starts at its first call and its connections open at the job's first query,
so an async job that never uses the ORM costs neither. See ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.db import connections

from .connections import ExecutorConnections

_STOP = object()


class Lane(Executor):
    """One daemon thread running one call at a time, with the thread's own connections.

    An ``Executor`` so that asgiref can run a job's thread-sensitive calls on it. Calls are
    submitted from the event loop thread only; the thread starts with the first of them. A daemon
    thread, unlike a ``ThreadPoolExecutor``'s: a job stuck in a blocking call must not keep the
    worker process from exiting.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None
        self.orm: ExecutorConnections | None = None  # set by the thread before its first call
        self.job = None  # the job holding the lane (read by the dispatcher for its pids)
        # Never given to another job (set by the dispatcher when it gives up on the job holding
        # it): when that job ends its thread closes its connections and ends.
        self.retired = False
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        # Calls submitted and not done. Not just the last one: a call cancelled while it waits
        # is done at once, though the call before it may still run (asgiref cannot stop it).
        self._unfinished: list[Future] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self.thread.start()
        future: Future = Future()
        self._calls.put((future, fn, args, kwargs))
        self._unfinished = [call for call in self._unfinished if not call.done()]
        self._unfinished.append(future)
        return future

    def idle(self) -> bool:
        """No call submitted is still waiting or running (say, one a cancelled task stopped
        awaiting: asgiref cannot stop it)."""
        self._unfinished = [call for call in self._unfinished if not call.done()]
        return not self._unfinished

    def after_job(self):
        """(On the lane's thread.) ``ExecutorConnections.after_job`` of its connections."""
        return self.orm.after_job()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The thread closes its connections and ends once the calls before this one are done."""
        if self.thread is None:
            return
        self._calls.put(_STOP)
        if wait:
            self.thread.join()

    def orm_open(self) -> bool:
        """The lane holds a database connection now (a plain read of its thread's wrappers)."""
        orm = self.orm
        return orm is not None and any(w.connection is not None for w in orm.wrappers)

    def backend_pids(self) -> dict[str, list[int]]:
        return self.orm.backend_pids() if self.orm is not None else {}

    def _serve(self) -> None:
        self.orm = ExecutorConnections()  # this thread's connections, watched for its life
        try:
            with self.orm.observing():
                while (item := self._calls.get()) is not _STOP:
                    future, fn, args, kwargs = item
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
                        future.set_exception(error)
                    else:
                        future.set_result(result)
        finally:
            connections.close_all()  # the server rolls back whatever was left open


class LanePool:
    """The lanes of one async executor, idle ones reused last-in first-out (event loop thread;
    the dispatcher only reads ``lanes``)."""

    def __init__(self) -> None:
        self.lanes: list[Lane] = []  # every lane not retired, idle or held
        self._idle: list[Lane] = []
        self._numbered = 0

    def take(self, job) -> Lane:
        if self._idle:
            lane = self._idle.pop()
        else:
            lane = Lane(f"pgjobs-async-lane-{self._numbered}")
            self._numbered += 1
            self.lanes.append(lane)
        lane.job = job
        return lane

    def give_back(self, lane: Lane, reusable: bool) -> None:
        """The job holding ``lane`` has ended; ``reusable``: its connections were checked after
        it (else the lane ends, and its connections with it)."""
        lane.job = None
        if reusable and not lane.retired:
            self._idle.append(lane)
            return
        self.lanes.remove(lane)
        lane.shutdown(wait=False)

    def close(self) -> None:
        for lane in self.lanes:
            lane.shutdown(wait=False)
        self._idle.clear()

    def threads(self) -> list[threading.Thread]:
        """The threads a stopping worker waits for: not those of lanes given up on."""
        return [lane.thread for lane in list(self.lanes) if lane.thread and not lane.retired]


def bind(lane: Lane) -> ThreadSensitiveContext:
    """Send the calling task's thread-sensitive calls (and those of the tasks it creates) to
    ``lane``; returns the key to ``unbind`` when the job ends.

    asgiref's per-context executor, as ``ThreadSensitiveContext`` sets it for a request, with the
    lane as the executor: the context variable and the context-to-executor map it reads (asgiref
    3.8 and later). A new key per job: a task the job left running after it returned cannot reach
    the lane the next job holds.
    """
    key = ThreadSensitiveContext()
    SyncToAsync.context_to_thread_executor[key] = lane
    SyncToAsync.thread_sensitive_context.set(key)  # in this task's own context only
    return key


def unbind(key: ThreadSensitiveContext) -> None:
    SyncToAsync.context_to_thread_executor.pop(key, None)
