"""What a job does to its connection stays with that job: real ``runjobs`` processes.

A job that leaves a transaction open fails its own attempt and the jobs after it commit; a job
that changes its session does not break the jobs after it; ``CONN_MAX_AGE`` is honoured between
jobs; a job abandoned at shutdown does not keep its statement and locks alive.
"""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from helpers import database_url_for_tests, run_worker, wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution

pytestmark = pytest.mark.django_db(transaction=True)

PERSISTENT = {"PGJOBS_TEST_CONN_MAX_AGE": "none"}


def labels_run() -> list[str]:
    return sorted(Execution.objects.values_list("label", flat=True))


@pytest.mark.parametrize("how", ["set_autocommit", "begin"])
def test_job_leaving_a_transaction_open_fails_and_later_jobs_commit(start_worker, how):
    leaky = demo.leave_transaction_open.using(priority=100).enqueue("leaky", how)
    labels = [f"after-{i:02}" for i in range(20)]
    demo.record.enqueue_many([(label,) for label in labels])
    worker = start_worker("--concurrency", "2", "--burst", env=PERSISTENT)
    assert worker.wait(60) == 0, worker.output()
    assert labels_run() == labels  # every later job's write committed; the leaky one's did not
    dead = DeadLetter.objects.get()
    assert dead.job_id == leaky.pk and dead.error_type.endswith("TransactionLeftOpen")
    assert "inside a transaction" in dead.reason and "rolled back" in dead.reason
    assert not Job.objects.exists()
    assert "succeeded=20 " in worker.output() and "dead_lettered=1 " in worker.output()


def test_autocommit_left_off_after_a_commit_is_restored_without_failing(start_worker):
    demo.commit_with_autocommit_off.using(priority=100).enqueue("committed")
    demo.record.enqueue_many([(f"after-{i}",) for i in range(5)])
    worker = start_worker("--concurrency", "1", "--burst", env=PERSISTENT)
    assert worker.wait(60) == 0, worker.output()
    assert labels_run() == ["after-0", "after-1", "after-2", "after-3", "after-4", "committed"]
    assert not DeadLetter.objects.exists() and not Job.objects.exists()


def test_job_changing_search_path_does_not_break_later_jobs(start_worker):
    demo.change_search_path.using(priority=100).enqueue()
    labels = [f"after-{i:02}" for i in range(10)]
    demo.record.enqueue_many([(label,) for label in labels])
    worker = start_worker("--concurrency", "1", "--burst", env=PERSISTENT)
    assert worker.wait(60) == 0, worker.output()
    assert labels_run() == labels
    assert not DeadLetter.objects.exists() and not Job.objects.exists()
    assert "migrate" not in worker.output()


@pytest.mark.parametrize("max_age, kept", [("0", 0), ("none", 2)])
def test_conn_max_age_is_honoured_between_jobs(start_worker, other_connection, max_age, kept):
    demo.record.enqueue_many([((f"job-{i}",), {"sleep": 0.2}) for i in range(6)])
    worker = start_worker(
        "--concurrency",
        "2",
        "--no-listen",
        env={"PGJOBS_TEST_CONN_MAX_AGE": max_age, "PGAPPNAME": "pgjobs-max-age"},
    )
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    time.sleep(0.3)  # the last job's connection is settled after its acknowledgement
    backends = other_connection.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'pgjobs-max-age'"
    ).fetchone()[0]
    assert backends == 1 + kept  # the dispatcher's, plus the executors' when they are kept
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_abandoned_job_statement_is_ended_and_its_lock_released(start_worker, other_connection):
    Counter.objects.create(name="locked")
    demo.hold_row_lock.enqueue("locked", 60)
    worker = start_worker("--shutdown-grace", "0.5")

    def lock_held() -> bool:
        return bool(
            other_connection.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'demo_counter' AND l.mode = 'RowShareLock' "
                "AND l.pid <> pg_backend_pid()"
            ).fetchone()[0]
        )

    wait_until(lock_held, timeout=30)
    time.sleep(0.3)  # inside pg_sleep
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert "ended 1 database session(s) of abandoned job(s)" in worker.output()
    started = time.monotonic()
    with psycopg.connect(database_url_for_tests(), autocommit=True) as conn:
        conn.execute("SET lock_timeout = '1s'")
        with conn.transaction():
            row = conn.execute(
                "SELECT value FROM demo_counter WHERE name = 'locked' FOR UPDATE"
            ).fetchone()
    assert row is not None and time.monotonic() - started < 1.5
    job = Job.objects.get()
    assert job.status == "ready" and job.attempts == 1
    assert "shut down before the job finished" in job.errors[0]["message"]


def test_atomic_job_closing_its_connection_says_so():
    enqueued = demo.close_connection_atomic.enqueue("closer")
    demo.record.enqueue("after")
    run_worker(concurrency=1)
    dead = DeadLetter.objects.get()
    assert dead.job_id == enqueued.pk and dead.error_type.endswith("ConnectionClosedByJob")
    assert "closed its database connection" in dead.reason
    assert "set_rollback" not in dead.reason
    assert labels_run() == ["after"]  # the closer's write was rolled back; the next job ran
