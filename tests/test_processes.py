"""Real ``runjobs`` processes against real PostgreSQL: concurrency, SIGKILL, SIGTERM, crashes.

Execution rows (no unique constraint) record every run of a job, so counting them per label shows
whether a job ran exactly once.
"""

from __future__ import annotations

import signal
import time
from collections import Counter as Tally

import pytest
from django.db import connection
from helpers import FAST_LEASES, wait_for_leases_to_expire, wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution

pytestmark = pytest.mark.django_db(transaction=True)


def executions_by_label() -> Tally:
    return Tally(Execution.objects.values_list("label", flat=True))


def test_four_workers_run_5000_jobs_exactly_once(start_worker):
    labels = [f"job-{i}" for i in range(5000)]
    half = len(labels) // 2
    demo.record.enqueue_many([(label,) for label in labels[:half]])
    demo.record_atomic.enqueue_many([(label,) for label in labels[half:]])
    # Persistent connections (CONN_MAX_AGE=None): at Django's default of 0 every job opens one,
    # which costs these 5,000 short jobs three times their run; the chaos suite drains thousands
    # of jobs on the default (test_job_connections.py tests both between jobs).
    persistent = {"PGJOBS_TEST_CONN_MAX_AGE": "none"}
    workers = [
        start_worker("--concurrency", "4", "--burst", "--batch-size", "8", env=persistent)
        for _ in range(4)
    ]
    for worker in workers:
        assert worker.wait(timeout=300) == 0, worker.output()
    tally = executions_by_label()
    assert len(tally) == 5000 and set(tally.values()) == {1}, "some job ran twice or not at all"
    assert not Job.objects.exists()
    assert not DeadLetter.objects.exists()
    assert sum(Counter.objects.values_list("value", flat=True)) == 5000 - half
    # every worker took part (SKIP LOCKED spreads the work instead of serialising it)
    assert len(set(Execution.objects.values_list("pid", flat=True))) == 4


def test_sigkilled_workers_jobs_complete_after_their_lease_expires(start_worker):
    labels = [f"slow-{i}" for i in range(8)]
    demo.record.enqueue_many([((label,), {"sleep": 1.5}) for label in labels])
    victim = start_worker("--concurrency", "4", env=FAST_LEASES)
    wait_until(lambda: Job.objects.filter(status="running").count() == 4, timeout=30)
    in_flight = set(Job.objects.filter(status="running").values_list("id", flat=True))
    victim.kill()  # SIGKILL: no chance to hand anything back
    assert Execution.objects.count() == 0  # they were mid-sleep, nothing recorded yet
    survivor = start_worker("--concurrency", "4", env=FAST_LEASES)
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()
    tally = executions_by_label()
    assert set(tally) == set(labels) and set(tally.values()) == {1}
    rescued = Execution.objects.filter(job_id__in=in_flight)
    assert rescued.count() == 4 and set(rescued.values_list("attempt", flat=True)) == {2}
    assert "rescued" in survivor.output()


def test_job_that_kills_its_worker_every_time_ends_in_dead_letters(start_worker):
    enqueued = demo.crash_worker.enqueue()  # max_attempts=2, calls os._exit(13)
    demo.record.enqueue("bystander")
    deadline = time.monotonic() + 90
    exits = []
    while not DeadLetter.objects.exists():
        assert time.monotonic() < deadline, f"never dead-lettered; exits: {exits}"
        worker = start_worker("--burst", env=FAST_LEASES)
        exits.append(worker.wait(timeout=60))
        wait_for_leases_to_expire()  # the crashed attempt's
    dead = DeadLetter.objects.get()
    assert dead.job_id == enqueued.pk and dead.attempts == 2
    assert dead.error_type == "LeaseExpired" and "worker died" in dead.reason
    assert exits.count(13) == 2  # it crashed its worker twice, never a third time
    assert not Job.objects.filter(pk=enqueued.pk).exists()
    assert executions_by_label()["bystander"] == 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown_finishes_running_and_hands_back_unstarted(start_worker, signum):
    labels = [f"graceful-{i}" for i in range(6)]
    demo.record.enqueue_many([((label,), {"sleep": 2}) for label in labels])
    worker = start_worker("--concurrency", "2", "--prefetch", "4", "--batch-size", "6")
    wait_until(lambda: Job.objects.filter(status="running").count() == 6, timeout=30)
    time.sleep(0.3)  # the two executors have started their jobs
    worker.signal(signum)
    assert worker.wait(timeout=30) == 0, worker.output()
    output = worker.output()
    assert "handed back 4 claimed job(s) that had not started" in output
    assert Execution.objects.count() == 2  # the running ones finished
    back = Job.objects.all()
    assert back.count() == 4
    assert all(j.status == "ready" and j.attempts == 0 and j.errors == [] for j in back)
    assert not DeadLetter.objects.exists()


def test_sigusr1_prints_every_threads_stack_and_the_worker_goes_on(start_worker):
    demo.record.enqueue("sleeper", sleep=3)
    worker = start_worker()
    wait_until(lambda: Job.objects.filter(status="running").exists(), timeout=30)
    worker.signal(signal.SIGUSR1)
    # the stacks, frame by frame, the job's thread among them (read until fully written)
    wait_until(lambda: "executors.py" in worker.output(), timeout=10)
    assert "most recent call first" in worker.output()
    wait_until(lambda: not Job.objects.exists(), timeout=30)  # the job still finished
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()


def test_shutdown_grace_expiry_records_a_failed_attempt(start_worker):
    demo.record.enqueue("too-slow", sleep=30)
    worker = start_worker("--shutdown-grace", "0.5")
    wait_until(lambda: Job.objects.filter(status="running").exists(), timeout=30)
    time.sleep(0.3)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    job = Job.objects.get()
    assert job.status == "ready" and job.attempts == 1
    assert "shut down before the job finished" in job.errors[0]["message"]


def test_worker_survives_dropped_connections(start_worker, other_connection):
    labels = [f"drop-{i}" for i in range(40)]
    demo.record.enqueue_many([((label,), {"sleep": 0.1}) for label in labels])
    demo.record_atomic.enqueue_many([((f"{label}-atomic",), {"sleep": 0.1}) for label in labels])
    worker = start_worker("--concurrency", "2", env=FAST_LEASES)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        test_backend = cursor.fetchone()[0]
    for _ in range(3):
        wait_until(lambda: Execution.objects.count() > 0, timeout=30)
        time.sleep(0.5)
        other_connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            (test_backend,),
        )
    wait_until(lambda: not Job.objects.exists(), timeout=90)
    assert worker.popen.poll() is None, "the worker died:\n" + worker.output()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    tally = executions_by_label()
    assert set(tally) == set(labels) | {f"{label}-atomic" for label in labels}
    assert not DeadLetter.objects.exists()
    # atomic jobs: their writes commit with their completion, so exactly once
    assert all(tally[f"{label}-atomic"] == 1 for label in labels)
    assert "database unavailable" in worker.output() or "reconnecting" in worker.output()


def test_atomic_job_on_another_jobs_database_warns_and_keeps_its_default_writes(start_worker):
    """PGJOBS["DATABASE"] = "jobs" (a second alias): the atomic job's transaction is on "jobs",
    its Execution row goes through "default" and stays although the job failed (pgjobs.W001)."""
    enqueued = demo.write_then_fail.using(max_attempts=1).enqueue("outside the transaction")
    worker = start_worker("--burst", env={"PGJOBS_TEST_JOBS_ALIAS": "jobs"})
    assert worker.wait(60) == 0, worker.output()
    output = worker.output()
    assert "pgjobs.W001" in output and "'jobs'" in output, output
    dead = DeadLetter.objects.get()
    assert dead.job_id == enqueued.pk and "failed after writing" in dead.reason
    assert Execution.objects.filter(label="outside the transaction").count() == 1
