"""The worker's maintenance units (django_pgjobs/worker/maintenance.py), each built from a
database, a config and what its duty reads, and run with ``run_once()`` against the test
database: no ``Worker`` is built."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from django_pgjobs import operations
from django_pgjobs.metrics import QueueMetrics
from django_pgjobs.models import Job, QueueStat
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.states import Status
from django_pgjobs.worker.faults import DispatcherDatabase
from django_pgjobs.worker.maintenance import (
    HeartbeatConfig,
    HeartbeatCounts,
    LeaseHeartbeat,
    LivenessConfig,
    LivenessFile,
    MetricsConfig,
    MetricsFlush,
    PruneConfig,
    Pruner,
    RegistryConfig,
    RegistryTouch,
    RescueConfig,
    Rescuer,
    StatsLog,
    StatsLogConfig,
)
from django_pgjobs.worker.outcomes import Stats
from django_pgjobs.worker.state import DispatcherState
from django_pgjobs.worker.stopping import StopState
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def database() -> DispatcherDatabase:
    return DispatcherDatabase("default", StopState(grace=0))


def claim(count: int, worker_id: str = "test-worker") -> list[operations.ClaimedJob]:
    """Claim ``count`` jobs for ``worker_id`` the way a worker's loop does."""
    claims = operations.ClaimBuilder(worker=worker_id, queues=None, lease_seconds=60)
    return operations.complete(connection, claim=claims.take(count)).claimed


def holding(jobs) -> DispatcherState:
    state = DispatcherState()
    for job in jobs:
        state.hold(job)
    return state


def lease_left(job_id: int) -> float:
    expires = Job.objects.values_list("lease_expires_at", flat=True).get(pk=job_id)
    return (expires - timezone.now()).total_seconds()


def heartbeat(state: DispatcherState, aborts: list | None = None) -> LeaseHeartbeat:
    def on_abort(ids) -> int:
        ids = list(ids)
        if aborts is not None:
            aborts.extend(ids)
        return len(ids)

    return LeaseHeartbeat(database(), HeartbeatConfig(), state, on_abort)


def test_lease_heartbeat_extends_the_leases_of_the_held_jobs_only():
    for label in ("a", "b", "c"):
        demo.record.enqueue(label)
    held, released = claim(2), claim(1)[0]  # the last: claimed here, but no longer held
    Job.objects.update(lease_expires_at=timezone.now() + dt.timedelta(seconds=2))

    counts = heartbeat(holding(held)).run_once()

    assert counts == HeartbeatCounts(extended=2, lost=0, abort_requested=0)
    assert all(lease_left(job.id) > 50 for job in held)
    assert lease_left(released.id) < 3


def test_lease_heartbeat_does_not_extend_a_job_past_its_timeout():
    for label in ("within", "past", "no timeout"):
        demo.record.enqueue(label)
    within, past, untimed = jobs = claim(3)
    now = time.monotonic()
    within.timeout, within.deadline = 60.0, now + 60
    past.timeout, past.deadline = 1.0, now - 0.5
    Job.objects.update(lease_expires_at=timezone.now() + dt.timedelta(seconds=2))

    assert heartbeat(holding(jobs)).run_once().extended == 2

    assert lease_left(within.id) > 50
    assert lease_left(untimed.id) > 50
    assert lease_left(past.id) < 3  # left to run out


def test_lease_heartbeat_warns_about_a_lease_taken_elsewhere(caplog):
    demo.record.enqueue("x")
    (job,) = claim(1)
    # a rescue and another worker's claim give the job a new claim token
    Job.objects.filter(pk=job.id).update(claim_token=None, status=Status.READY)

    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        counts = heartbeat(holding([job])).run_once()

    assert counts == HeartbeatCounts(extended=0, lost=1, abort_requested=0)
    assert f"lease of job {job.name} #{job.id} was lost (rescued elsewhere)" in caplog.text


def test_lease_heartbeat_does_not_call_a_job_that_ended_under_its_claim_lost(caplog):
    """An atomic job commits its completion on its executor's thread; the dispatcher, which runs
    the heartbeat, hears of it a moment later. A heartbeat in between finds the row finished
    under this claim (or deleted): not extended, and not a lost lease either."""
    for label in ("done", "deleted", "running"):
        demo.record.enqueue(label)
    done, deleted, running = jobs = claim(3)
    Job.objects.filter(pk=done.id).update(status=Status.SUCCESSFUL, lease_expires_at=None)
    Job.objects.filter(pk=deleted.id).delete()

    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        counts = heartbeat(holding(jobs)).run_once()

    assert counts == HeartbeatCounts(extended=1, lost=0, abort_requested=0)
    assert "was lost" not in caplog.text
    assert lease_left(running.id) > 50


def test_lease_heartbeat_passes_on_the_aborts_requested():
    demo.record.enqueue("keep")
    demo.record.enqueue("abort me")
    keep, abort = claim(2)
    operations.request_abort(connection, [abort.id], requested_by="test")
    seen: list[int] = []

    counts = heartbeat(holding([keep, abort]), seen).run_once()

    assert seen == [abort.id] and counts.abort_requested == 1 and counts.extended == 2


def test_registry_touch_marks_the_worker_alive_and_forgets_silent_workers():
    for worker_id in ("alive", "silent"):
        operations.register_worker(
            connection, worker_id=worker_id, hostname="h", pid=1, queues=None, concurrency=1
        )
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    WorkerRow.objects.update(last_seen_at=long_ago)

    forgotten = RegistryTouch(database(), RegistryConfig("alive", forget_seconds=60)).run_once()

    assert forgotten == 1
    seen = WorkerRow.objects.values_list("last_seen_at", flat=True).get(pk="alive")
    assert (timezone.now() - seen).total_seconds() < 5
    assert not WorkerRow.objects.filter(pk="silent").exists()


def test_rescuer_requeues_a_job_whose_lease_expired(caplog):
    demo.record.enqueue("x")
    (job,) = claim(1, worker_id="crashed")
    Job.objects.filter(pk=job.id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))

    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        rescued = Rescuer(database(), RescueConfig()).run_once()

    assert rescued == operations.Rescued(requeued=1, dead_lettered=0, returned_unstarted=0)
    assert Job.objects.get(pk=job.id).status == Status.READY
    assert "rescued 1 job(s) with expired leases (1 requeued, 0 dead-lettered)" in caplog.text


def test_pruner_deletes_successes_past_their_retention_only():
    for label in ("old", "recent", "old with result"):
        demo.record.enqueue(label)
    old, recent, with_result = claim(3)
    Job.objects.update(status=Status.SUCCESSFUL, claim_token=None)
    Job.objects.filter(pk__in=[old.id, with_result.id]).update(
        finished_at=timezone.now() - dt.timedelta(hours=2)
    )
    Job.objects.filter(pk=recent.id).update(finished_at=timezone.now())
    Job.objects.filter(pk=with_result.id).update(keep_result=True)
    config = PruneConfig(keep_succeeded_seconds=3600, keep_results_seconds=86400)

    assert Pruner(database(), config).run_once() == 1

    assert set(Job.objects.values_list("pk", flat=True)) == {recent.id, with_result.id}


def test_metrics_flush_writes_the_counts_it_was_given():
    demo.record.enqueue("x")
    (job,) = claim(1)
    queue_metrics = QueueMetrics()
    queue_metrics.claimed([job])
    queue_metrics.succeeded(job)

    assert MetricsFlush(database(), MetricsConfig(), queue_metrics).run_once() == 1

    assert list(QueueStat.objects.values_list("queue", "succeeded")) == [("default", 1)]


def test_stats_log_writes_the_summary_and_starts_a_new_window(caplog):
    stats = Stats(succeeded=3, retried=1, dead_lettered=1, window_finished=5)

    with caplog.at_level(logging.INFO, logger="django_pgjobs.worker"):
        assert StatsLog(StatsLogConfig(), stats).run_once() == 5

    assert "summary: processed=5 succeeded=3 retried=1 dead_lettered=1" in caplog.text
    assert stats.window_finished == 0


def test_liveness_file_is_touched_at_start_then_on_its_interval(tmp_path, caplog):
    path = tmp_path / "alive"
    unit = LivenessFile(LivenessConfig(str(path), interval_seconds=30))
    assert unit.next_due <= time.monotonic()  # at start
    assert unit.run_once() is True
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    assert unit.run_once() is True
    assert path.stat().st_mtime > long_ago + 3000
    missing = LivenessFile(LivenessConfig(str(tmp_path / "gone" / "alive")))
    with caplog.at_level(logging.WARNING, logger="django_pgjobs.worker"):
        assert missing.run_once() is False  # logged, the worker goes on
    assert "could not touch the liveness file" in caplog.text


def test_each_unit_runs_on_its_own_interval():
    start = time.monotonic()
    state = DispatcherState()
    rescuer = Rescuer(database(), RescueConfig(interval_seconds=100))
    lease = heartbeat(state)
    lease_heartbeat = LeaseHeartbeat(database(), HeartbeatConfig(30), state, lambda ids: 0)
    registry = RegistryTouch(database(), RegistryConfig("w", interval_seconds=30))

    # the rescuer runs at start (what a crashed predecessor left); the others after an interval
    assert rescuer.next_due <= time.monotonic()
    assert lease.next_due >= start + 10  # the default: HEARTBEAT_SECONDS' default
    assert lease_heartbeat.next_due >= start + 30
    assert registry.next_due >= start + 30

    now = time.monotonic()
    rescuer.run_if_due(now)
    assert now + 80 <= rescuer.next_due <= now + 120  # jittered by +-20%
    heartbeat_due = lease_heartbeat.next_due
    lease_heartbeat.run_if_due(now)  # not due: not run, not rescheduled
    assert lease_heartbeat.next_due == heartbeat_due


def test_a_worker_builds_its_units_from_its_options_and_the_settings(settings):
    from django_pgjobs.worker import Worker

    settings.PGJOBS = {
        **settings.PGJOBS,
        "HEARTBEAT_SECONDS": 30,
        "LEASE_SECONDS": 90,
        "RESCUE_INTERVAL_SECONDS": 100,
        "KEEP_SUCCEEDED_SECONDS": 5,
        "VACUUM_INTERVAL_SECONDS": 20,
    }
    worker = Worker(listen=False, install_signal_handlers=False, stats_interval=7)
    units = {type(unit).__name__: unit for unit in worker._maintenance_units()}

    assert list(units) == [
        "Timeouts",
        "MetricsFlush",
        "LeaseHeartbeat",
        "RegistryTouch",
        "Rescuer",
        "TableVacuum",
        "Pruner",
        "Scheduler",
        "StatsLog",
    ]
    assert units["LeaseHeartbeat"].config == HeartbeatConfig(30)
    assert units["RegistryTouch"].config == RegistryConfig(worker.id, 30, forget_seconds=150)
    assert units["Rescuer"].config.interval_seconds == 100
    assert units["Pruner"].config.keep_succeeded_seconds == 5
    assert units["StatsLog"].config == StatsLogConfig(7)
    assert units["TableVacuum"].config.interval_seconds == 20
    assert worker.liveness is None
    settings.PGJOBS = {**settings.PGJOBS, "VACUUM_INTERVAL_SECONDS": None}
    worker = Worker(listen=False, install_signal_handlers=False)
    assert "TableVacuum" not in {type(unit).__name__ for unit in worker._maintenance_units()}


def test_the_liveness_file_runs_first_every_heartbeat(settings, tmp_path):
    from django_pgjobs.worker import Worker

    settings.PGJOBS = {**settings.PGJOBS, "HEARTBEAT_SECONDS": 4, "LEASE_SECONDS": 60}
    path = tmp_path / "alive"
    worker = Worker(listen=False, install_signal_handlers=False, liveness_file=path)
    first = worker._maintenance_units()[0]
    assert first is worker.liveness
    assert first.config == LivenessConfig(str(path), 4)
    with pytest.raises(ValueError, match="liveness_file"):
        Worker(install_signal_handlers=False, liveness_file=tmp_path / "gone" / "alive")


def test_the_liveness_file_is_touched_while_a_dispatcher_step_waits_for_the_database(tmp_path):
    """A job that fails during an outage has its failure recorded by a step that retries until
    the database is back, inside one turn of the loop: the file went stale and the deploy files'
    probes restarted a worker for an outage that was not its fault."""
    dispatcher = database()
    path = tmp_path / "alive"
    unit = LivenessFile(LivenessConfig(str(path), interval_seconds=0.2), dispatcher)
    unit.run_if_due(time.monotonic())
    touched = [path.stat().st_mtime]
    tries = []

    def step():
        tries.append(time.monotonic())
        if len(tries) < 5:  # 0.5 + 1 + 2 + 4 s of waits: an outage of 7.5 s
            touched.append(path.stat().st_mtime)
            raise OperationalError("the database is away")
        return "done"

    assert dispatcher.with_retries(step) == "done"
    assert len(set(touched)) >= 3  # touched during the waits, not only before the step
