"""docs/howto/handlers.md, "Long-running jobs and timeouts"."""

from __future__ import annotations

import asyncio
import time

from django_pgjobs import job


@job(queue="timeouts", timeout=1, max_attempts=2)
def call_slow_api(seconds: float) -> None:
    time.sleep(seconds)  # a sync thread cannot be stopped: the worker stops waiting for it


@job(queue="timeouts", timeout=1, max_attempts=2)
async def poll_slow_api(seconds: float) -> None:
    await asyncio.sleep(seconds)  # cancelled at its timeout


@job(queue="timeouts")
def quick_report(label: str) -> str:
    return label
