"""A worker on its caller's thread and connection: ``run_jobs()`` inside a transaction (Django's
``TestCase``, ``@pytest.mark.django_db`` without ``transaction=True``).

The worker is the production one: the same claim, leases, fencing, acknowledgements, retries,
results and dead letters, the same statements. Two parts are swapped:

- ``InlineExecutors`` runs each job the moment the claim hands it over, on the dispatcher's
  thread and so on the caller's connection, inside the caller's transaction: the jobs see the
  rows the test wrote, and the test's rollback takes back everything they did. Each job runs in
  a savepoint, released when it returns or raises, rolled back only when the job left the
  transaction failed (a database error it caught, ``set_rollback``), so that the worker can go
  on recording its outcome. ``async def`` jobs are awaited through ``async_to_sync``: their
  ORM calls come back to this thread, as in Django's own async tests.
- ``InlineDatabase`` never closes the caller's connection and does not wait out errors (a
  transaction cannot outlive one).

What differs from a worker process, and why: one job at a time; a plain ``def`` job's timeout
is not enforced (it runs on the caller's thread, which cannot be interrupted), an ``async def``
job's only while it awaits (its synchronous calls come back to this thread); ``now()`` is the time the caller's transaction began, so a job delayed or retried with
a back-off is not due until ``run_jobs(with_scheduled=True)`` makes it so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TypeVar

import psycopg
from asgiref.sync import async_to_sync
from django.db import connections, transaction

from .. import registry, signals
from ..errors import JobTimeout
from ..operations import ClaimedJob
from .executors import ExecutorPool
from .faults import DispatcherDatabase
from .outcomes import Failed, Succeeded, send

T = TypeVar("T")
logger = logging.getLogger("django_pgjobs.worker")


class InlineDatabase(DispatcherDatabase):
    """The caller's connection, in the caller's transaction: never closed, never retried."""

    def connection(self):
        return connections[self.alias]

    def close(self) -> None:
        """Closing it would end the caller's transaction (a test's, with everything in it)."""

    def with_retries(self, operation: Callable[[], T]) -> T:
        return operation()


class _Undo(Exception):
    """Leaves the job's savepoint rolled back: the job left the transaction failed."""


class InlineExecutors(ExecutorPool):
    """The executor pool's part, with no thread: ``submit()`` runs the job there and then."""

    interrupted: KeyboardInterrupt | None = None

    def start(self) -> None:
        pass

    def all_threads(self) -> list:
        return []

    def close(self) -> None:
        pass

    def submit(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        if self._begin(job):
            result = self._in_savepoints(job, definition)
            if isinstance(result, Failed) and isinstance(result.error, KeyboardInterrupt):
                self.interrupted = result.error  # recorded as the job's failure, then raised
            self.inbox.put(result)

    def raise_if_interrupted(self) -> None:
        """Raise the ``KeyboardInterrupt`` a job raised (Ctrl-C while it ran on this thread):
        the worker recorded it as that job's failure and stopped; the caller stops too."""
        if self.interrupted is not None:
            raise self.interrupted

    def _in_savepoints(self, job: ClaimedJob, definition: registry.JobDefinition):
        """Run the job in a savepoint on every connection of this thread inside a transaction
        (the jobs database's and any other the job may write to), then run the ``on_commit``
        callbacks it registered where its savepoint was released, as a worker process runs
        them at once (a plain job in autocommit) or at the job's own commit (``atomic``)."""
        aliases = [alias for alias in connections if connections[alias].in_atomic_block]
        pending = {alias: len(connections[alias].run_on_commit) for alias in aliases}
        with ExitStack() as savepoints:
            for alias in aliases:
                savepoints.enter_context(_savepoint(alias))
            if definition.is_async:
                result = async_to_sync(self._await)(job, definition)
            else:
                result = self._execute(job, definition)
        for alias, before in pending.items():
            callbacks = connections[alias].run_on_commit[before:]
            del connections[alias].run_on_commit[before:]
            for _, callback, robust in callbacks:
                result = _run_callback(callback, robust, result)
        return result

    async def _await(self, job: ClaimedJob, definition: registry.JobDefinition):
        send(signals.job_started, self.sender, job=job)
        started = time.monotonic()
        task = asyncio.ensure_future(self.async_executor.await_job(job, definition))
        done, _ = await asyncio.wait({task}, timeout=job.timeout)
        if done:
            return task.result()
        task.cancel()
        await asyncio.wait({task})
        error = JobTimeout(f"timed out after {job.timeout:g} s")
        return Failed(job, error, time.monotonic() - started)


@contextmanager
def _savepoint(alias: str) -> Iterator[None]:
    """A savepoint on ``alias``, released at the end unless the job left the transaction
    failed (a database error it caught or let through, ``set_rollback``): then rolled back, so
    that the caller's transaction goes on."""
    connection = connections[alias]
    try:
        with transaction.atomic(using=alias):
            yield
            if connection.needs_rollback or _failed(connection):
                raise _Undo
    except _Undo:
        pass


def _run_callback(callback: Callable[[], object], robust: bool, result):
    """One ``on_commit`` callback of the job's. One that raises fails a plain job that had
    succeeded, as ``on_commit()`` raising inside it would in autocommit; else it is logged (a
    robust callback, or the job's outcome is recorded already)."""
    try:
        callback()
    except Exception as error:
        if not robust and isinstance(result, Succeeded) and not result.acked:
            return Failed(result.job, error, result.duration)
        logger.exception("job %s #%s: an on_commit callback failed", result.job.name, result.job.id)
    return result


def _failed(connection) -> bool:
    """The transaction is aborted: only a rollback (to the savepoint) lets it go on."""
    raw = connection.connection
    return raw is not None and raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
