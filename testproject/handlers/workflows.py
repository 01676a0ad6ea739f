"""docs/howto/workflows.md: the jobs of its examples (chain, group, chord, results)."""

from __future__ import annotations

import os
import time

from django_pgjobs import job
from django_pgjobs.context import current_job
from django_pgjobs.workflows import previous_results
from testproject.demo.models import Counter, Execution


def _record(label: str) -> None:
    running = current_job()
    Execution.objects.create(
        job_id=running.id, attempt=running.attempts, label=label, pid=os.getpid()
    )


@job(queue="workflows")
def charge(order_id: int) -> None:
    _record(f"charge-{order_id}")


@job(queue="workflows", max_attempts=1)
def ship(order_id: int) -> None:
    # fails while the warehouse has no stock: the chain stops here, email never runs
    if not Counter.objects.filter(name="stock", value__gt=0).exists():
        raise RuntimeError("out of stock")
    _record(f"ship-{order_id}")


@job(queue="workflows")
def email(order_id: int) -> None:
    _record(f"email-{order_id}")


@job(queue="workflows", keep_result=True)
def resize(image_id: int) -> int:
    time.sleep(0.2)  # the work
    _record(f"resize-{image_id}")
    return image_id * 10


@job(queue="workflows")
def build_zip(album: str) -> None:
    # the group's return values, in the group's order (resize keeps its result)
    sizes = previous_results()
    _record(f"zip-{album}:{len(sizes)}:{sum(sizes)}")


@job(queue="workflows")
def record_previous(album: str) -> None:
    """(tests) Records what previous_results() gives it, as it is."""
    _record(f"previous-{album}:{previous_results()}")


@job(queue="workflows")
def touch(customer_id: int) -> None:
    """A member of a large fan-out: does nothing but succeed."""


@job(queue="workflows", max_attempts=1)
def crunch(part: int) -> None:
    """A long step that stops when its abort is requested (it polls for it)."""
    _record(f"crunch-{part}")
    for _ in range(600):
        current_job().raise_if_aborted()
        time.sleep(0.05)
