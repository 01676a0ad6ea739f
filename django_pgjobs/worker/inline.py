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
job's is; ``now()`` is the time the caller's transaction began, so a job delayed or retried with
a back-off is not due until ``run_jobs(with_scheduled=True)`` makes it so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from asgiref.sync import async_to_sync
from django.db import connections, transaction

from .. import registry, signals
from ..errors import JobTimeout
from ..operations import ClaimedJob
from .executors import ExecutorPool
from .faults import DispatcherDatabase
from .outcomes import Failed, send

T = TypeVar("T")


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

    def start(self) -> None:
        pass

    def all_threads(self) -> list:
        return []

    def close(self) -> None:
        pass

    def submit(self, job: ClaimedJob, definition: registry.JobDefinition) -> None:
        if self._begin(job):
            self.inbox.put(self._in_savepoint(job, definition))

    def _in_savepoint(self, job: ClaimedJob, definition: registry.JobDefinition):
        connection = connections[self.alias]
        result = None
        try:
            with transaction.atomic(using=self.alias):
                if definition.is_async:
                    result = async_to_sync(self._await)(job, definition)
                else:
                    result = self._execute(job, definition)
                if connection.needs_rollback or _failed(connection):
                    raise _Undo
        except _Undo:
            pass
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


def _failed(connection) -> bool:
    """The transaction is aborted: only a rollback (to the savepoint) lets it go on."""
    raw = connection.connection
    return raw is not None and raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
