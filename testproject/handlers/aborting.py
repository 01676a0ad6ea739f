"""docs/howto/handlers.md, "Aborting a running job": a long job that stops when asked."""

from __future__ import annotations

import asyncio
import time

from django.db.models import F

from django_pgjobs import AbortResult, abort, job
from django_pgjobs.context import current_job
from testproject.demo.models import Counter


@job(queue="handlers", max_attempts=3)
def recount(counter: str, steps: int) -> None:
    # A long loop checks, between steps, whether an operator asked it to stop. The check is
    # free (an attribute the worker sets); raising Aborted ends the attempt as aborted.
    for _ in range(steps):
        current_job().raise_if_aborted()
        Counter.objects.filter(name=counter).update(value=F("value") + 1)
        time.sleep(0.05)


@job(queue="handlers", max_attempts=3)
def recount_to_the_end(counter: str, steps: int) -> None:
    # A job that must not stop halfway reads the flag at the end only: it finishes its work,
    # records that an abort was asked for, and returns normally (the attempt has succeeded).
    for _ in range(steps):
        Counter.objects.filter(name=counter).update(value=F("value") + 1)
        time.sleep(0.05)
    if current_job().abort_requested:
        Counter.objects.filter(name=counter).update(value=-F("value"))


@job(queue="handlers", max_attempts=3)
async def recount_async(counter: str, steps: int) -> None:
    # An async job needs no check: an abort cancels its task (asyncio.CancelledError is raised
    # at the await it is paused on). Catch it only to clean up, then let it propagate.
    for _ in range(steps):
        await Counter.objects.filter(name=counter).aupdate(value=F("value") + 1)
        await asyncio.sleep(0.05)


def stop_recount(job_id: int) -> AbortResult:
    # From your own code (a view, a shell, a script): abort by id. A waiting job is cancelled,
    # a running one is asked to stop; the result says which.
    return abort(job_id, requested_by="support desk")
