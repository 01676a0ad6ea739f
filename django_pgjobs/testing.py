"""Helpers for testing your own jobs (use them with pytest-django or Django's TestCase).

``run_jobs()`` runs what is queued through the real claim/complete path (an in-process worker in
burst mode), so a test exercises the same SQL, fencing and retries as production.
``enqueued()`` and ``assert_enqueued()`` look at what your code put in the queue.

Jobs are rows of your database: tests that call ``run_jobs()`` need the rows committed where
the worker's threads can see them, i.e. ``@pytest.mark.django_db(transaction=True)`` or
``TransactionTestCase``. ``enqueued()``/``assert_enqueued()`` work in any database test.
"""

from __future__ import annotations

from typing import Any

from .models import Job
from .registry import JobDefinition, resolve
from .worker import Stats, Worker


def run_jobs(
    queues: list[str] | None = None, *, concurrency: int = 1, **worker_options: Any
) -> Stats:
    """Run every job that is ready now (and what they enqueue that is ready), then return the
    worker's counters (``succeeded``, ``retried``, ``dead_lettered``...). Failed jobs are
    retried later, as in production: call again after their backoff to run them."""
    worker_options.setdefault("listen", False)
    worker = Worker(
        queues=queues,
        concurrency=concurrency,
        burst=True,
        install_signal_handlers=False,
        **worker_options,
    )
    worker.run()
    return worker.stats


def enqueued(job: JobDefinition | str | None = None, *, queue: str | None = None):
    """Jobs waiting or running, oldest first, optionally of one job and/or queue."""
    jobs = Job.objects.filter(status__in=["ready", "running"]).order_by("id")
    if job is not None:
        jobs = jobs.filter(name=resolve(job).name)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    return list(jobs)


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
