"""The worker loop in-process: success, retry with backoff, dead letters, atomic jobs (rows and
handlers that misbehave are in test_bad_input.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import threading
import time
import uuid

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from helpers import drain, run_worker

from django_pgjobs import job, operations, signals
from django_pgjobs.context import current_job
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.operations import ClaimedJob
from django_pgjobs.worker import Worker
from django_pgjobs.worker.outcomes import Superseded
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution, Signup

pytestmark = pytest.mark.django_db(transaction=True)


def test_successful_jobs_are_deleted_by_default():
    for i in range(25):
        demo.record.enqueue(f"job-{i}")
    worker = run_worker(concurrency=3)
    assert Job.objects.count() == 0
    assert Execution.objects.count() == 25
    assert worker.stats.succeeded == 25


def test_retention_keeps_successful_jobs(settings):
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": 3600}
    job_row = demo.record.enqueue("kept")
    run_worker()
    kept = Job.objects.get(pk=job_row.pk)
    assert kept.status == "successful" and kept.finished_at is not None


def test_retry_with_backoff_then_success():
    enqueued = demo.flaky.enqueue("flaky", fail_times=2)
    started = time.monotonic()
    drain()
    executions = list(Execution.objects.filter(label="flaky").order_by("attempt"))
    assert [e.attempt for e in executions] == [1, 2, 3]
    # backoff: base 0.2s, factor 2, jitter <= 50% -> at least 0.1 + 0.2 seconds of waiting
    assert time.monotonic() - started >= 0.3
    assert not Job.objects.filter(pk=enqueued.pk).exists()
    assert not DeadLetter.objects.exists()


def test_failed_attempt_keeps_error_and_waits_for_backoff():
    enqueued = demo.flaky.enqueue("wait", fail_times=5)
    run_worker()
    row = Job.objects.get(pk=enqueued.pk)
    assert row.status == "ready" and row.attempts == 1 and row.view == "retrying"
    # flaky's policy: base 0.2 s, jitter up to half, so the next attempt is 0.1..0.2 s after
    # the failure was recorded (the database's now() at the retry, after the error's "at")
    backoff = row.run_after - dt.datetime.fromisoformat(row.errors[0]["at"])
    assert dt.timedelta(seconds=0.09) <= backoff <= dt.timedelta(seconds=0.25), backoff
    (error,) = row.errors
    assert error["type"] == "ConnectionError"
    assert "flaky service unavailable" in error["message"]
    assert 'raise ConnectionError(f"flaky service unavailable' in error["traceback"]


def test_exhaustion_moves_job_to_dead_letters_with_every_traceback():
    enqueued = demo.always_fails.enqueue("boom")
    drain()
    assert not Job.objects.exists()
    dead = DeadLetter.objects.get(job_id=enqueued.pk)
    assert dead.attempts == dead.max_attempts == 3
    assert [e["attempt"] for e in dead.errors] == [1, 2, 3]
    assert all("raise ValueError(message)" in e["traceback"] for e in dead.errors)
    assert dead.error_type == "ValueError"
    assert dead.reason.startswith("attempts exhausted (3/3): ValueError: boom")
    assert dead.args == ["boom"] and dead.created_at == enqueued.created_at


def test_atomic_job_that_writes_then_raises_leaves_no_write():
    demo.write_then_fail.enqueue("atomic-fail")
    drain()
    assert not Execution.objects.filter(label="atomic-fail").exists()
    dead = DeadLetter.objects.get()
    assert dead.attempts == 2 and "failed after writing" in dead.reason


def test_atomic_job_commits_its_writes_with_completion():
    signup = Signup.objects.create(email="a@example.com")
    demo.send_welcome_email.enqueue(signup.pk)
    run_worker()
    signup.refresh_from_db()
    assert signup.welcomed_at is not None
    assert not Job.objects.exists()


def test_atomic_job_whose_lease_was_lost_rolls_back(monkeypatch):
    """Fencing inside the atomic transaction: if the claim token changed, nothing commits."""
    from django_pgjobs import operations

    original = operations.complete

    def steal_then_complete(conn, jobs=(), **kwargs):
        # Another worker rescued and re-claimed the job meanwhile: new token.
        if jobs and kwargs.get("claim") is None:  # the atomic job's own completion
            with connection.cursor() as cursor:
                cursor.execute("UPDATE pgjobs_job SET claim_token = gen_random_uuid()")
        return original(conn, jobs, **kwargs)

    monkeypatch.setattr(operations, "complete", steal_then_complete)
    demo.record_atomic.enqueue("stolen")
    worker = run_worker()
    assert worker.stats.lost == 1
    assert not Execution.objects.filter(label="stolen").exists()
    assert not Counter.objects.filter(name="stolen").exists()


def test_priority_then_due_time_order():
    demo.record.using(priority=-5).enqueue("low")
    demo.record.enqueue("normal-1")
    demo.record.using(priority=10).enqueue("high")
    demo.record.enqueue("normal-2")
    run_worker(concurrency=1, batch_size=1)
    order = list(Execution.objects.order_by("id").values_list("label", flat=True))
    assert order == ["high", "normal-1", "normal-2", "low"]


def test_queues_and_paused_queues():
    from django_pgjobs import operations

    demo.record.using(queue="a").enqueue("in-a")
    demo.record.using(queue="b").enqueue("in-b")
    demo.record.using(queue="c").enqueue("in-c")
    operations.set_queue_paused(connection, "c", True)
    run_worker(queues=["a", "c"])
    assert set(Execution.objects.values_list("label", flat=True)) == {"in-a"}
    run_worker()
    assert set(Execution.objects.values_list("label", flat=True)) == {"in-a", "in-b"}
    operations.set_queue_paused(connection, "c", False)
    run_worker()
    assert Execution.objects.count() == 3


def test_scheduled_jobs_wait_for_run_after():
    demo.record.using(delay=3600).enqueue("later")
    run_worker()
    assert Execution.objects.count() == 0
    assert Job.objects.get().view == "scheduled"


def test_max_jobs_stops_after_n():
    for i in range(7):
        demo.record.enqueue(str(i))
    worker = run_worker(burst=False, max_jobs=3, concurrency=2)
    assert worker.stats.succeeded == 3
    assert Job.objects.count() == 4


def test_signals_fire(caplog):
    seen = []

    def on(signal_name):
        def receiver(sender, **kwargs):
            seen.append(signal_name)

        return receiver

    receivers = {
        signals.job_started: on("started"),
        signals.job_succeeded: on("succeeded"),
        signals.job_failed: on("failed"),
        signals.job_dead_lettered: on("dead"),
    }
    for sig, receiver in receivers.items():
        sig.connect(receiver)
    try:
        demo.record.enqueue("s")
        demo.flaky.enqueue("f", fail_times=1)
        Job.objects.create(name="nope.nope")
        run_worker()
    finally:
        for sig, receiver in receivers.items():
            sig.disconnect(receiver)
    assert seen.count("started") == 2 and "succeeded" in seen
    assert "failed" in seen and "dead" in seen


def test_logs_start_failures_and_summary(caplog):
    caplog.set_level(logging.INFO, logger="django_pgjobs")
    demo.always_fails.enqueue("logged")
    run_worker(concurrency=2)
    text = caplog.text
    assert "started: release=- queues=all concurrency=2" in text
    assert "failed (attempt 1/3): ValueError: logged; retrying in" in text
    assert "stopped: processed=1" in text


def test_heartbeat_extends_leases(settings):
    settings.PGJOBS = {**settings.PGJOBS, "LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 0.5}
    demo.record.enqueue("slow", sleep=3)
    run_worker()
    # It ran once even though it took longer than its lease: the heartbeat kept it.
    assert Execution.objects.filter(label="slow").count() == 1
    assert not Job.objects.exists()


def test_worker_registers_and_unregisters():
    from django_pgjobs.models import Worker as WorkerRow

    seen = []

    def peek(sender, **kwargs):
        seen.extend(WorkerRow.objects.values_list("pid", flat=True))

    signals.job_started.connect(peek)
    try:
        demo.record.enqueue("x")
        run_worker()
    finally:
        signals.job_started.disconnect(peek)
    assert seen == [os.getpid()]
    assert not WorkerRow.objects.exists()


@job(name="tests.long_lease", lease_seconds=600)
def long_lease() -> None:
    """Records how long its own lease still runs while it runs."""
    running = current_job()
    lease = Job.objects.values_list("lease_expires_at", flat=True).get(pk=running.id)
    Execution.objects.create(
        job_id=running.id,
        attempt=running.attempts,
        label=f"{(lease - timezone.now()).total_seconds():.0f}",
        pid=os.getpid(),
    )


def test_a_jobs_own_lease_holds_from_the_start():
    """The claim gives every job the worker's lease (60 s here); a job declaring a longer one has
    it before its function starts, not only from the first heartbeat (10 s later)."""
    long_lease.enqueue()
    run_worker()
    (execution,) = Execution.objects.all()
    assert int(execution.label) > 500, f"lease ran {execution.label}s at start"


def test_a_lost_connection_while_extending_own_leases_strands_no_job(monkeypatch):
    """The claim has committed when the worker extends the leases of jobs with their own: if the
    connection drops right then, the jobs still run and a burst worker still finishes."""
    real = operations.extend_leases
    calls = []

    def drop_the_first(connection, jobs):
        calls.append(len(jobs))
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(connection, jobs)

    monkeypatch.setattr(operations, "extend_leases", drop_the_first)
    long_lease.enqueue()
    demo.record.enqueue("bystander")
    worker = Worker(burst=True, listen=False, install_signal_handlers=False)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "the worker never finished: claimed jobs were stranded"
    assert calls and worker.stats.succeeded == 2
    assert Execution.objects.count() == 2 and not Job.objects.exists()


def test_a_stale_run_finishing_keeps_the_new_claim_of_its_job():
    """A worker can claim a job again (its lease expired and it was rescued) while the old run
    still goes on. When the old run finishes, the new claim stays held: heartbeats keep its lease
    and shutdown waits for it."""
    worker = Worker(listen=False, install_signal_handlers=False)
    old = ClaimedJob(
        id=7,
        name=demo.record.name,
        queue="default",
        priority=0,
        args=["x"],
        kwargs={},
        attempts=1,
        max_attempts=5,
        run_after=timezone.now(),
        created_at=timezone.now(),
        claim_token=uuid.uuid4(),
    )
    new = dataclasses.replace(old, attempts=2, claim_token=uuid.uuid4())
    worker.state.hold(new)
    worker._handle(Superseded(old))  # the old run's atomic completion was refused
    worker.acks.settle([old], done=set())  # or its batched acknowledgement was
    assert worker.state.held == {7: new}
    worker._handle(Superseded(new))
    assert worker.state.held == {}


def test_a_burst_worker_runs_what_its_jobs_enqueue_before_it_leaves():
    """A job that enqueues the next step (a chain written by hand): the burst worker (and
    ``run_jobs()``) looks once more after jobs finish, without LISTEN to wake it."""
    from django_pgjobs.testing import run_jobs
    from testproject.handlers.from_celery import build_report

    build_report.delay("burst")
    stats = run_jobs(concurrency=4, listen=False)  # a claim short of its limit
    assert stats.succeeded == 2
    assert Counter.objects.get(name="report-burst").value == 2  # the second step ran


def test_an_atomic_job_whose_on_commit_callback_fails_has_succeeded(caplog):
    """The callback runs after the job's writes and its completion committed: the job is
    counted and logged as succeeded, the callback's error logged as the callback's. (It was
    taken for the job's failure, whose recording found the job complete: 'lease was lost',
    counted lost.)"""
    demo.record_then_a_callback_fails.enqueue("kept")
    with caplog.at_level(logging.INFO, logger="django_pgjobs.worker"):
        worker = run_worker()
    assert worker.stats.succeeded == 1 and worker.stats.lost == 0
    assert list(Execution.objects.values_list("label", flat=True)) == ["kept"]
    assert not Job.objects.exists() and not DeadLetter.objects.exists()
    assert "then one of its on_commit callbacks failed: the on_commit callback failed" in (
        caplog.text
    )
    assert "lease was lost" not in caplog.text
