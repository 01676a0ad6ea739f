"""Helpers for testing your own jobs (use them with Django's ``TestCase`` or pytest-django).

``run_jobs()`` runs what is queued through the real claim/complete path (a worker in burst
mode), so a test exercises the same SQL, fencing, retries, results and dead letters as
production. ``enqueued()`` and ``assert_enqueued()`` look at what your code put in the queue.

Inside a transaction (Django's ``TestCase``, ``@pytest.mark.django_db`` without
``transaction=True``) the worker runs on the test's own thread and connection
(``worker/inline.py``): it sees the rows the test wrote, and the test's rollback takes back the
jobs and what they did. Outside one (``TransactionTestCase``, ``transaction=True``) it runs as
in production, with executor threads on their own connections.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models.expressions import RawSQL

from .conf import get_config, job_databases, queue_database
from .models import Job
from .operations import run_jobs_now
from .registry import JobDefinition, resolve
from .worker import Stats, Worker
from .worker.inline import InlineExecutors


def run_jobs(
    queues: list[str] | None = None,
    *,
    concurrency: int = 1,
    with_scheduled: bool = False,
    with_schedules: bool = False,
    max_rounds: int = 100,
    database: str | None = None,
    **worker_options: Any,
) -> Stats:
    """Run every job that is ready now (and what they enqueue that is ready), then return the
    worker's counters (``succeeded``, ``retried``, ``dead_lettered``...).

    ``with_scheduled=True`` also runs the jobs due later (``delay=``, ``run_after=``, retries
    waiting out their back-off): made due now, again after each round, until none is left, so
    a failing job runs through all its attempts to its dead letter; past ``max_rounds`` rounds
    (a job that schedules itself again and again) it raises ``RuntimeError`` naming the jobs
    still scheduled. Without it, failed jobs are retried later, as in production.

    ``with_schedules=True`` also fires the recurring jobs due (``@job(cron=...)``, the admin's
    schedules), as a worker does; without it only the jobs the test enqueued run.

    With queues on several databases (``PGJOBS["QUEUE_DATABASES"]``) it runs a worker per
    database, in turn, until none finds a job: those of ``queues``, or ``database``, else every
    jobs database the test may use."""
    total = Stats()
    plan = _plan(queues, database)
    for _ in range(max_rounds):
        claimed = total.claimed
        for alias, its_queues in plan:
            _add(
                total,
                run_burst(
                    queues=its_queues,
                    database=alias,
                    concurrency=concurrency,
                    schedules=with_schedules,
                    **worker_options,
                ),
            )
        due = [
            (alias, _make_scheduled_due(alias, its_queues))
            for alias, its_queues in plan
            if with_scheduled
        ]
        if not any(ids for _, ids in due) and (len(plan) == 1 or total.claimed == claimed):
            return total
    names = sorted({n for alias, ids in due for n in _names(alias, ids)})
    raise RuntimeError(
        f"run_jobs(with_scheduled=True): jobs still scheduled after {max_rounds} rounds "
        f"(a job that schedules itself again?): {', '.join(names)}"
    )


def _plan(queues: list[str] | None, database: str | None) -> list[tuple[str, list[str] | None]]:
    """The databases to run workers on, each with its queues (None: all of that database)."""
    if database is not None:
        return [(database, queues)]
    if queues:
        by_alias: dict[str, list[str]] = {}
        for queue in queues:
            by_alias.setdefault(queue_database(queue), []).append(queue)
        return list(by_alias.items())
    return [(alias, None) for alias in _databases()]


def _databases() -> list[str]:
    """The jobs databases this test may use: all of them, but those a ``TestCase`` (or
    ``django_db``) does not list in its ``databases``, which Django refuses queries on."""
    usable = [alias for alias in job_databases() if _usable(alias)]
    return usable or [get_config().DATABASE]


def _usable(alias: str) -> bool:
    """Whether this test may query ``alias``: Django's ``TestCase`` replaces the ``cursor`` of
    a database a test does not list with a failure that keeps the method as ``wrapped``, and
    after the test puts the method back as an attribute of the connection (so an attribute
    alone says nothing: every database a test left out has one from then on)."""
    return not hasattr(connections[alias].cursor, "wrapped")


def _jobs(alias: str | None = None):
    return Job.objects.using(alias or get_config().DATABASE)


def _names(alias: str, ids: list[int]) -> list[str]:
    return list(_jobs(alias).filter(id__in=ids).values_list("name", flat=True))


def run_burst(*, concurrency: int = 1, database: str | None = None, **worker_options: Any) -> Stats:
    """One burst worker: on the caller's thread and connection inside a transaction
    (``worker/inline.py``), else with executor threads as in production; its counters.
    ``only_ids=[...]`` claims those jobs and no other (immediate mode, ``immediate.py``)."""
    inline = _connection(database).in_atomic_block
    worker_options.setdefault("listen", False)
    worker = Worker(
        concurrency=1 if inline else concurrency,
        burst=True,
        install_signal_handlers=False,
        inline=inline,
        database=database,
        **worker_options,
    )
    worker.run()
    if isinstance(worker.executors, InlineExecutors):  # Ctrl-C in a job: recorded, then raised
        worker.executors.raise_if_interrupted()
    return worker.stats


def _connection(alias: str | None = None):
    return connections[alias or get_config().DATABASE]


def _scheduled(alias: str, queues: list[str] | None):
    """The waiting jobs due later than the claim's ``now()``: in a transaction, when it began
    (Django's ``Now()`` is the statement's time, which a job retried a moment ago is already
    behind)."""
    later = _jobs(alias).filter(status="ready", run_after__gt=RawSQL("now()", ()))
    return later.filter(queue__in=queues) if queues else later


def _make_scheduled_due(alias: str, queues: list[str] | None) -> list[int]:
    """The jobs due later made due now, by the admin's "Run now"; their ids."""
    ids = list(_scheduled(alias, queues).values_list("id", flat=True))
    return run_jobs_now(_connection(alias), ids)


def _add(total: Stats, stats: Stats) -> None:
    for counter in ("claimed", "succeeded", "retried", "dead_lettered", "lost", "released"):
        setattr(total, counter, getattr(total, counter) + getattr(stats, counter))


def enqueued(job: JobDefinition | str | None = None, *, queue: str | None = None):
    """Jobs waiting or running, oldest first (database by database, with queues on several:
    ``PGJOBS["QUEUE_DATABASES"]``), optionally of one job and/or queue."""
    found = []
    for alias in [queue_database(queue)] if queue is not None else _databases():
        jobs = _jobs(alias).filter(status__in=["ready", "running"]).order_by("id")
        if job is not None:
            jobs = jobs.filter(name=resolve(job).name)
        if queue is not None:
            jobs = jobs.filter(queue=queue)
        found += list(jobs)
    return found


def assert_enqueued(job: JobDefinition | str, *args: Any, **kwargs: Any) -> Job:
    """Assert that ``job`` is queued with exactly these arguments; returns the ``Job`` row."""
    name = resolve(job).name
    candidates = enqueued(name)
    expected = (list(args), kwargs)
    for candidate in candidates:
        if (candidate.args, candidate.kwargs) == expected:
            return candidate
    seen = [(c.args, c.kwargs) for c in candidates] or "no jobs"
    raise AssertionError(
        f"{name} with args={list(args)!r} kwargs={kwargs!r} not enqueued; saw {seen}"
    )
