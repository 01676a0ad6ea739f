"""Immediate mode (``PGJOBS["IMMEDIATE"] = True``), for development and tests: a job enqueued
in a transaction runs in this process when that transaction commits, and not at all when it
rolls back; enqueued in autocommit, it runs at once.

It runs through the worker (``testing.run_burst``): the job's row is claimed, its arguments are
read back from the JSON stored, its outcome is recorded by the production statements (retries,
dead letters, kept results). The claim takes only the jobs this call enqueued
(``WorkerOptions.only_ids``), never another process's, nor a job due later (``delay=``,
``run_after=``, a retry's back-off): those wait for a worker or ``run_jobs()``.

Unlike Celery's ``task_always_eager``, nothing is called in the caller's stack: a failing job
does not raise into the view that enqueued it, it is retried or dead-lettered as in production.
The system check ``pgjobs.E005`` refuses immediate mode when ``DEBUG`` is off, unless
``PGJOBS["IMMEDIATE_WITHOUT_DEBUG"]`` says it is meant (a test settings module).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections

__all__ = ["run_after_commit"]


def run_after_commit(alias: str, ids: Sequence[int]) -> None:
    """Run the jobs ``ids`` when the current transaction on ``alias`` commits (at once in
    autocommit). A rolled-back transaction or savepoint discards the callback with its rows."""
    if not ids:
        return
    ids = list(ids)

    def run_enqueued_jobs_after_commit() -> None:  # named: Django logs callbacks by __qualname__
        from .testing import run_burst

        run_burst(only_ids=ids)

    connections[alias].on_commit(run_enqueued_jobs_after_commit)
