"""The worker's maintenance units (django_pgjobs/worker/maintenance.py), one ``run_once()`` at a
time against the test database, as the dispatcher runs them between claims."""

from __future__ import annotations

import datetime as dt
import logging
import time

import pytest
from django.db import connection
from django.utils import timezone

from django_pgjobs import operations
from django_pgjobs.models import Job, QueueStat
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.states import Status
from django_pgjobs.worker import Worker
from django_pgjobs.worker.maintenance import (
    LeaseHeartbeat,
    MetricsFlush,
    RegistryTouch,
    Rescuer,
    units_for,
)
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def claim(worker: Worker, count: int) -> list[operations.ClaimedJob]:
    """Claim ``count`` jobs for ``worker`` the way its loop does, and hold them."""
    _, jobs = operations.complete_and_claim_jobs(
        connection,
        [],
        limit=count,
        worker=worker.id,
        queues=None,
        lease_seconds=worker.lease_seconds,
    )
    for claimed in jobs:
        worker.held[claimed.id] = claimed
    return jobs


def lease_left(job_id: int) -> float:
    expires = Job.objects.values_list("lease_expires_at", flat=True).get(pk=job_id)
    return (expires - timezone.now()).total_seconds()


def test_lease_heartbeat_extends_the_leases_of_the_held_jobs_only():
    for label in ("a", "b", "c"):
        demo.record.enqueue(label)
    worker = Worker(listen=False, install_signal_handlers=False)
    held, released = claim(worker, 2), claim(worker, 1)[0]
    del worker.held[released.id]  # claimed by this worker, but no longer held by it
    Job.objects.update(lease_expires_at=timezone.now() + dt.timedelta(seconds=2))

    LeaseHeartbeat(worker).run_once()

    assert all(lease_left(job.id) > 50 for job in held)
    assert lease_left(released.id) < 3


def test_lease_heartbeat_does_not_extend_a_job_past_its_timeout():
    for label in ("within", "past", "no timeout"):
        demo.record.enqueue(label)
    worker = Worker(listen=False, install_signal_handlers=False)
    within, past, untimed = claim(worker, 3)
    now = time.monotonic()
    within.timeout, within.deadline = 60.0, now + 60
    past.timeout, past.deadline = 1.0, now - 0.5
    Job.objects.update(lease_expires_at=timezone.now() + dt.timedelta(seconds=2))

    LeaseHeartbeat(worker).run_once()

    assert lease_left(within.id) > 50
    assert lease_left(untimed.id) > 50
    assert lease_left(past.id) < 3  # left to run out


def test_lease_heartbeat_warns_about_a_lease_taken_elsewhere(caplog):
    demo.record.enqueue("x")
    worker = Worker(listen=False, install_signal_handlers=False)
    (job,) = claim(worker, 1)
    # a rescue and another worker's claim give the job a new claim token
    Job.objects.filter(pk=job.id).update(claim_token=None, status=Status.READY)

    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        LeaseHeartbeat(worker).run_once()

    assert f"lease of job {job.name} #{job.id} was lost (rescued elsewhere)" in caplog.text


def test_registry_touch_marks_the_worker_alive():
    worker = Worker(listen=False, install_signal_handlers=False)
    worker._register()
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    WorkerRow.objects.filter(pk=worker.id).update(last_seen_at=long_ago)

    RegistryTouch(worker).run_once()

    seen = WorkerRow.objects.values_list("last_seen_at", flat=True).get(pk=worker.id)
    assert (timezone.now() - seen).total_seconds() < 5


def test_rescuer_requeues_a_job_whose_lease_expired(caplog):
    demo.record.enqueue("x")
    crashed = Worker(listen=False, install_signal_handlers=False)
    (job,) = claim(crashed, 1)
    Job.objects.filter(pk=job.id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))

    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        Rescuer(Worker(listen=False, install_signal_handlers=False)).run_once()

    assert Job.objects.get(pk=job.id).status == Status.READY
    assert "rescued 1 job(s) with expired leases (1 requeued, 0 dead-lettered)" in caplog.text


def test_metrics_flush_writes_the_counts_of_the_worker():
    demo.record.enqueue("x")
    worker = Worker(listen=False, install_signal_handlers=False)
    (job,) = claim(worker, 1)
    worker.metrics.claimed([job])
    worker.metrics.succeeded(job)

    MetricsFlush(worker).run_once()

    assert list(QueueStat.objects.values_list("queue", "succeeded")) == [("default", 1)]


def test_each_unit_runs_on_its_own_interval(settings):
    settings.PGJOBS = {**settings.PGJOBS, "HEARTBEAT_SECONDS": 30, "RESCUE_INTERVAL_SECONDS": 100}
    worker = Worker(listen=False, install_signal_handlers=False)
    start = time.monotonic()
    units = {type(unit).__name__: unit for unit in units_for(worker)}

    # the rescuer runs at start (what a crashed predecessor left); the others after an interval
    assert units["Rescuer"].next_due <= time.monotonic()
    assert units["LeaseHeartbeat"].next_due >= start + 30
    assert units["RegistryTouch"].next_due >= start + 30

    now = time.monotonic()
    units["Rescuer"].run_if_due(now)
    assert now + 80 <= units["Rescuer"].next_due <= now + 120  # jittered by +-20%
    heartbeat_due = units["LeaseHeartbeat"].next_due
    units["LeaseHeartbeat"].run_if_due(now)  # not due: not run, not rescheduled
    assert units["LeaseHeartbeat"].next_due == heartbeat_due
