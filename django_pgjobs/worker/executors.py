"""The executor pool: ``concurrency`` threads that run jobs and report how they ended.

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

from django.db import connections, transaction

from .. import operations, registry, signals
from ..conf import get_config
from ..context import reset_current_job, set_current_job
from ..operations import ClaimedJob
from ..payload import dump_result
from .connections import ExecutorConnections, check_transaction_kept
from .outcomes import Failed, HandBack, LeaseLost, LostLease, Succeeded, send

logger = logging.getLogger("django_pgjobs.worker")


class ExecutorPool:
    def __init__(self, worker) -> None:
        self.worker = worker
        self.alias = worker.alias
        self.todo: queue_module.Queue = queue_module.Queue()  # dispatcher puts, executors take
        self.threads: list[threading.Thread] = []
        self.connections: list[ExecutorConnections] = []  # one per executor thread
        self.max_result_bytes = get_config().MAX_PAYLOAD_BYTES  # kept results: as arguments

    def start(self) -> None:
        for index in range(self.worker.concurrency):
            thread = threading.Thread(
                target=self._executor, name=f"pgjobs-executor-{index}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def submit(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        self.todo.put((job, definition))

    def waiting(self) -> int:
        """Jobs handed to the pool that no executor has taken yet."""
        return self.todo.qsize()

    def take_unstarted(self) -> list[ClaimedJob]:
        """(Dispatcher.) Empty the to-do queue: the jobs no executor has started."""
        unstarted = []
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
        return by_alias

    def close(self) -> None:
        """Tell every executor to exit once it is idle."""
        for _ in range(self.worker.concurrency):
            self.todo.put(None)

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
                    result = self._execute(job, definition)
                    self.worker.events.put(self._settle_connections(own, result))
        finally:
            connections.close_all()

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
        send(signals.job_started, self.worker.sender, job=job)
        started = time.monotonic()
        token = set_current_job(job)
        try:
            if definition.is_atomic():
                connection = connections[self.alias]  # made fit by before_job
                with transaction.atomic(using=self.alias):
                    value = definition.run(job.args, job.kwargs)
                    check_transaction_kept(connection)
                    if job.keep_result:  # not JSON: raises, the job's writes roll back
                        result = dump_result(value, self.max_result_bytes)
                        done = operations.complete_jobs_with_results(connection, [job], [result])
                    else:
                        done = operations.complete_jobs(connection, [job])
                    if job.id not in done:
                        raise LeaseLost()
                return Succeeded(job, time.monotonic() - started, acked=True)
            value = definition.run(job.args, job.kwargs)
            if job.keep_result:  # not JSON: a failed attempt, never a success without it
                result = dump_result(value, self.max_result_bytes)
                return Succeeded(job, time.monotonic() - started, result=result)
            return Succeeded(job, time.monotonic() - started)
        except LeaseLost:
            return LostLease(job)
        except KeyboardInterrupt as error:
            logger.warning("job %s #%s raised KeyboardInterrupt: shutting down", job.name, job.id)
            self.worker.request_stop()
            return Failed(job, error, time.monotonic() - started)
        except BaseException as error:  # noqa: B036 - SystemExit from a job is a failure, too
            return Failed(job, error, time.monotonic() - started)
        finally:
            reset_current_job(token)
