"""docs/howto/handlers.md, "Long-running jobs and timeouts"."""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async
from django.db import transaction

from django_pgjobs import RetryPolicy, job
from django_pgjobs.context import current_job
from testproject.demo.models import Execution


@job(queue="timeouts", timeout=1, max_attempts=2)
def call_slow_api(seconds: float) -> None:
    time.sleep(seconds)  # a sync thread cannot be stopped: the worker stops waiting for it


@job(queue="timeouts", timeout=1, max_attempts=2)
async def poll_slow_api(seconds: float) -> None:
    await asyncio.sleep(seconds)  # cancelled at its timeout


@job(queue="timeouts")
def quick_report(label: str) -> str:
    return label


def _write_rows(job_id: int, attempt: int, rows: int) -> None:
    with transaction.atomic():
        for row in range(rows):
            Execution.objects.create(job_id=job_id, attempt=attempt, label=f"row-{row}", pid=0)
            time.sleep(0.3)


@job(queue="timeouts", timeout=1, max_attempts=2, retry=RetryPolicy(base_seconds=0.1, jitter=0))
async def write_slowly(rows: int) -> None:
    # a call awaited in a thread is not stopped by the task's cancellation: it runs on until it
    # returns (or the worker ends its session); its retry is not due before then
    running = current_job()
    await sync_to_async(_write_rows)(running.id, running.attempts, rows)
