"""docs/howto/handlers.md, "Async handlers": async def jobs awaited on the worker's event loop."""

from __future__ import annotations

import asyncio

from django.db.models import F

from django_pgjobs import RetryPolicy, job
from django_pgjobs.context import current_job
from testproject.demo.models import Counter


@job(queue="async-handlers", max_attempts=3)
async def add_points_later(counter: str, points: int, pause: float = 0.01) -> None:
    await asyncio.sleep(pause)  # waiting on I/O: the other async jobs run meanwhile
    # Django's async ORM: each query runs on this job's own ORM thread, in autocommit
    await Counter.objects.filter(name=counter).aupdate(value=F("value") + points)


@job(queue="async-handlers", max_attempts=2, retry=RetryPolicy(base_seconds=0.1))
async def call_flaky_service(counter: str) -> None:
    await asyncio.sleep(0)
    attempt = current_job().attempts  # current_job() is per asyncio task
    await Counter.objects.acreate(name=f"{counter}-attempt-{attempt}")
    raise ConnectionError(f"service unavailable (attempt {attempt})")
