"""The executor pool: ``concurrency`` threads that run jobs and report how they ended, and the
async executor (``async_executor.py``) for ``async def`` jobs.

Each executor takes ``(job, definition)`` from the to-do queue, runs it on its own thread-local
connections (made fit before and checked after, see ``connections.py``) and puts the outcome on
the events queue for the dispatcher. An executor never touches the jobs connection's state, the
held jobs or the acknowledgements: those belong to the dispatcher.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, connections, transaction

from .. import operations, registry, signals, tracing
from ..context import reset_current_job, set_current_job
from ..operations import ClaimedJob
from ..payload import dump_result
from .async_executor import AsyncExecutor
from .connections import ExecutorConnections, check_transaction_kept
from .outcomes import Failed, HandBack, Inbox, LeaseLost, Succeeded, Superseded, one_line, send
from .starts import PendingStarts

logger = logging.getLogger("django_pgjobs.worker")


class ExecutorPool:
    def __init__(
        self,
        *,
        alias: str,
        concurrency: int,
        inbox: Inbox,
        starts: PendingStarts,
        sender: type,
        request_stop: Callable[[], None],
        max_result_bytes: int,
    ) -> None:
        self.alias = alias
        self.concurrency = concurrency
        self.inbox = inbox  # outcomes go there
        self.starts = starts  # held jobs' starts go there
        self.sender = sender  # of the signals sent
        self.request_stop = request_stop  # (any thread) a job raised KeyboardInterrupt
        self.max_result_bytes = max_result_bytes  # kept results: as arguments
        self.todo: queue_module.Queue = queue_module.Queue()  # dispatcher puts, executors take
        self.threads: list[threading.Thread] = []
        self.connections: list[ExecutorConnections] = []  # one per executor thread
        # its thread starts with the first async job
        self.async_executor = AsyncExecutor(inbox, sender, max_result_bytes)

    def start(self) -> None:
        for _ in range(self.concurrency):
            self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._executor, name=f"pgjobs-executor-{len(self.threads)}", daemon=True
        )
        thread.start()
        self.threads.append(thread)

    def all_threads(self) -> list[threading.Thread]:
        """The threads a stopping worker waits for: not those stuck in a job given up on."""
        stuck = {executor.thread for executor in self.connections if executor.retired}
        loop = self.async_executor.thread
        threads = [thread for thread in self.threads if thread not in stuck]
        lanes = self.async_executor.lanes.threads()  # they close their connections, then end
        return threads + ([loop] if loop is not None else []) + lanes

    def submit(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        if definition.is_async:
            self.async_executor.submit(job, definition)
        else:
            self.todo.put((job, definition))

    def cancel_async(self, job: ClaimedJob, error: BaseException) -> bool:
        """(Dispatcher.) True when ``job`` was a running async job and its task has been
        cancelled: its outcome will then be ``Failed(job, error, ...)`` (its own outcome if it
        finished before the cancellation reached it)."""
        return self.async_executor.started and self.async_executor.cancel(job, error)

    def retire(self, job: ClaimedJob) -> ExecutorConnections | None:
        """(Dispatcher.) The executor thread running ``job`` no longer counts as a slot: it
        exits once the job returns, and a new thread takes its place. Returns that executor."""
        # forget the retired executors whose thread has ended (removed one by one: executor
        # threads append to this list)
        for ended in [e for e in self.connections if e.retired and not e.thread.is_alive()]:
            self.connections.remove(ended)
        self.threads = [thread for thread in self.threads if thread.is_alive()]
        for executor in self.connections:
            if executor.job is job and not executor.retired:
                executor.retired = True
                self._start_thread()
                return executor
        return None

    def waiting(self) -> int:
        """Jobs handed to the pool that no executor has taken yet."""
        return self.todo.qsize()

    def take_unstarted(self) -> list[ClaimedJob]:
        """(Dispatcher.) Empty the to-do queue: the jobs no executor has started (and the async
        jobs the loop has not started)."""
        unstarted = self.async_executor.take_unstarted()
        while True:
            try:
                item = self.todo.get_nowait()
            except queue_module.Empty:
                return unstarted
            if item is not None:
                unstarted.append(item[0])

    def running_backends(self, held: dict[int, ClaimedJob]) -> dict[str, list[int]]:
        """(Dispatcher.) The server processes of the executors running a job still held, by
        alias: what to terminate when the worker gives up on those jobs."""
        by_alias: dict[str, list[int]] = {}
        for executor in self.connections:
            job = executor.job
            if job is not None and held.get(job.id) is job:
                for alias, pids in executor.backend_pids().items():
                    by_alias.setdefault(alias, []).extend(pids)
        for alias, pids in self.async_executor.backend_pids(held).items():
            by_alias.setdefault(alias, []).extend(pids)
        return by_alias

    def close(self) -> None:
        """Tell every executor to exit once it is idle; cancel the async jobs still running."""
        for _ in range(self.concurrency):
            self.todo.put(None)
        self.async_executor.close()

    # -- executor threads -----------------------------------------------------------------------

    def _executor(self) -> None:
        own = ExecutorConnections()
        self.connections.append(own)
        try:
            with own.observing():
                while True:
                    item = self.todo.get()
                    if item is None:
                        return
                    job, definition = item
                    own.before_job(job)
                    if not self._begin(job):
                        continue
                    result = self._execute(job, definition)
                    self.inbox.put(self._settle_connections(own, result))
                    if own.retired:  # timed out: a new executor has taken this one's place
                        return
        finally:
            connections.close_all()

    def _begin(self, job: ClaimedJob) -> bool:
        """The job is about to start: its start recorded (first, or by the dispatcher). False
        when it must not run: it was handed back (``_record_start_first``)."""
        refused = self._record_start_first(job)
        if refused is not None:
            self.inbox.put(refused)
            return False
        if job.held:  # started now: the dispatcher records it
            self.starts.started(job, time.monotonic())
        return True

    def _record_start_first(self, job: ClaimedJob) -> HandBack | None:
        """A held job the rescue once gave back unstarted has its start recorded here, before
        it runs, on this executor's connection: had it killed its worker before the dispatcher
        recorded the start, it would otherwise get its attempt back every time. None when it may
        run; a ``HandBack`` (it does not run, no attempt spent) when the start could not be
        recorded: the database failed, or the job is no longer this worker's."""
        if not job.start_recorded_first:
            return None
        try:
            recorded = operations.mark_started(connections[self.alias], [(job, 0.0)])
        except DatabaseError as error:
            return HandBack(job, error)
        if job.id not in recorded:
            return HandBack(job, LeaseLost(f"job #{job.id} is no longer held by this worker"))
        job.held = job.start_recorded_first = False
        return None

    def _settle_connections(self, own: ExecutorConnections, result):
        """Clean up after the job; what it left open is its failure, and a connection that had
        died while idle is not: that job goes back without an attempt."""
        left_open = own.after_job()
        if isinstance(result, Failed) and own.stale_connection_failed:
            return HandBack(result.job, result.error)
        if left_open is None:
            return result
        if isinstance(result, Succeeded) and not result.acked:
            return Failed(result.job, left_open, result.duration)
        if isinstance(result, Succeeded):  # an atomic job, committed: another alias was left
            logger.error("job %s #%s: %s", result.job.name, result.job.id, left_open)
        return result

    def _execute(self, job: ClaimedJob, definition: registry.JobDefinition):
        send(signals.job_started, self.sender, job=job)
        started = time.monotonic()
        if job.timeout is not None:
            job.deadline = started + job.timeout
        token = set_current_job(job)
        span = tracing.attempt_started(job)  # None without OpenTelemetry
        try:
            job.raise_if_aborted()  # aborted before it started: it never starts
            if definition.is_atomic():
                connection = connections[self.alias]  # made fit by before_job
                committed: list[bool] = []
                try:
                    with transaction.atomic(using=self.alias):
                        # first of the on_commit callbacks: it runs once the completion has
                        # committed, before the job's own
                        transaction.on_commit(lambda: committed.append(True), using=self.alias)
                        value = definition.run(job.args, job.kwargs)
                        check_transaction_kept(connection)
                        if job.keep_result:  # not JSON: raises, the job's writes roll back
                            result = dump_result(value, self.max_result_bytes)
                            done = operations.complete(connection, [job], results=[result]).ids
                        else:
                            done = operations.complete(connection, [job]).ids
                        if job.id not in done:
                            raise LeaseLost()
                except Exception as error:
                    if not committed:
                        raise
                    # a callback of the job's (transaction.on_commit) failed after it committed
                    # its writes and its completion: it succeeded, and the callback's error is
                    # the callback's, as in a view
                    logger.error(
                        "job %s #%s succeeded, then one of its on_commit callbacks failed: %s",
                        job.name,
                        job.id,
                        one_line(error),
                        exc_info=error,
                    )
                return Succeeded(job, time.monotonic() - started, acked=True)
            value = definition.run(job.args, job.kwargs)
            if job.keep_result:  # not JSON: a failed attempt, never a success without it
                result = dump_result(value, self.max_result_bytes)
                return Succeeded(job, time.monotonic() - started, result=result)
            return Succeeded(job, time.monotonic() - started)
        except LeaseLost:
            return Superseded(job)
        except KeyboardInterrupt as error:
            logger.warning("job %s #%s raised KeyboardInterrupt: shutting down", job.name, job.id)
            self.request_stop()
            return Failed(job, error, time.monotonic() - started)
        except BaseException as error:  # noqa: B036 - SystemExit from a job is a failure, too
            return Failed(job, error, time.monotonic() - started)
        finally:
            job.deadline = None  # returned: no longer watched
            reset_current_job(token)
            tracing.leave(span)
