"""docs/howto/django-tasks.md: plain ``django.tasks`` functions, nothing from django-pgjobs in
them; ``TASKS`` in testproject/settings.py points them at ``PgJobsBackend``."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from decimal import Decimal

from django.db.models import F

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2, with the django-tasks backport

from testproject.demo.models import Counter


@task(queue_name="tasks")
def add_points(counter: str, points: int) -> int:
    Counter.objects.filter(name=counter).update(value=F("value") + points)
    return Counter.objects.get(name=counter).value


@task(queue_name="tasks", priority=10)
def greet(name: str, *, punctuation: str = "!") -> str:
    return f"Hello, {name}{punctuation}"


@task(queue_name="tasks")
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task(queue_name="tasks")
async def shout(text: str) -> str:
    await asyncio.sleep(0)  # an async def task is awaited by the worker
    return text.upper()


@task(queue_name="tasks", takes_context=True)
def succeed_on_attempt(context, attempt: int) -> dict:
    # context.attempt counts this task's attempts (the first is 1)
    if context.attempt < attempt:
        raise RuntimeError(f"attempt {context.attempt} of {attempt} fails")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(queue_name="tasks", takes_context=True)
def add_points_failing_first(context, counter: str, points: int) -> int:
    # writes, then fails its first attempt: through the "atomic" backend that attempt's write
    # is rolled back with it, through "default" it stays
    Counter.objects.filter(name=counter).update(value=F("value") + points)
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails after its write")
    return Counter.objects.get(name=counter).value


@task(queue_name="tasks", takes_context=True)
async def aadd_points_failing_first(context, counter: str, points: int) -> int:
    # the same as an async def task: its ORM calls run in the attempt's transaction too
    await Counter.objects.filter(name=counter).aupdate(value=F("value") + points)
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails after its write")
    return (await Counter.objects.aget(name=counter)).value


@task(queue_name="tasks")
def add_points_returning(counter: str, points: int, kind: str) -> object:
    # Does its work, then returns what JSON cannot hold: the task is FAILED at once
    # (ResultNotJSON), and no retry adds the points again.
    Counter.objects.filter(name=counter).update(value=F("value") + points)
    if kind == "datetime":
        return datetime.now(timezone.utc)
    if kind == "decimal":
        return Decimal(points)
    return {points}  # a set


@task(queue_name="tasks")
def record_label(label: str) -> None:
    """One execution row, as the demo's ``record`` job writes (tests/test_run_jobs_in_testcase.py)."""
    import os

    from testproject.demo.models import Execution

    Execution.objects.create(job_id=0, label=label, pid=os.getpid())
