"""docs/howto/flow-control.md: per-key concurrency, rate limits and fair sharing
(tests/test_flow_control.py runs them with real ``runjobs`` processes)."""

from __future__ import annotations

import time

from django_pgjobs import job
from django_pgjobs.context import current_job
from django_pgjobs.models import Job
from testproject.demo.models import Execution


def _mark(label: str) -> None:
    running = current_job()
    Execution.objects.create(job_id=running.id, attempt=running.attempts, label=label, pid=0)


def _mark_claimed(label: str) -> None:
    """Record when the claim took this job (the database's clock: what the limit governs)."""
    started_at = Job.objects.filter(id=current_job().id).values_list("started_at", flat=True)[0]
    _mark(f"{label}@{started_at.timestamp()}")


# Never two syncs of one order at once, whichever worker runs them: each call names its order
# with .using(concurrency_key=...); without a concurrency_limit a key admits one job at a time.
@job(queue="flow")
def sync_order(order_id: int, step: int, seconds: float = 0.0) -> None:
    _mark(f"start:{order_id}:{step}")
    time.sleep(seconds)
    _mark(f"end:{order_id}:{step}")


# A plain job that hands on to a keyed one (an order placed, then synced under the order's key).
@job(queue="flow")
def place_order(order_id: int) -> None:
    _mark(f"placed:{order_id}")
    sync_order.using(concurrency_key=f"order:{order_id}").enqueue(order_id, 0)


# At most two exports of one account at once.
@job(queue="flow", concurrency_limit=2)
def export_account(account_id: int, part: int, seconds: float = 0.0) -> None:
    _mark(f"start:{account_id}:{part}")
    time.sleep(seconds)
    _mark(f"end:{account_id}:{part}")


# The partner's API takes 20 calls a second from all our workers together.
@job(queue="flow", rate_limit="20/s")
def call_partner(n: int) -> None:
    _mark_claimed(f"call:{n}")


# One tenant's big import must not starve the others: each call names its tenant.
@job(queue="flow")
def import_row(tenant: str, row: int) -> None:
    _mark(f"{tenant}:{row}")


@job(queue="flow", max_attempts=1)
def sync_order_once(order_id: int) -> None:
    """(tests) Fails: its dead letter keeps its flow key."""
    raise RuntimeError(f"order {order_id}: the shop is down")
