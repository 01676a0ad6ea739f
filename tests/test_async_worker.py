"""Async jobs in real ``runjobs`` processes: slots of their own, connection hygiene, a blocked
event loop."""

from __future__ import annotations

import signal
import time

import pytest
from helpers import count, wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_long_sync_jobs_ahead_in_the_queue_do_not_starve_async_jobs(start_worker):
    demo.record.enqueue_many([(f"sync-{i}", 0.5) for i in range(100)])
    demo.record_async.enqueue_many([(f"async-{i}",) for i in range(5)])
    worker = start_worker("--concurrency", "1")
    started = time.monotonic()
    wait_until(
        lambda: Execution.objects.filter(label__startswith="async-").count() == 5, timeout=30
    )
    # the async jobs ran while the one executor thread worked through the sync jobs
    assert time.monotonic() - started < 10
    assert Execution.objects.filter(label__startswith="sync-").count() < 20
    output = worker.output()
    assert "concurrency=1 async=32" in output, output
    worker.kill()


def test_a_transaction_left_open_by_an_async_job_is_rolled_back_and_charged_to_it(start_worker):
    demo.leave_transaction_open_async.enqueue("left open")
    worker = start_worker()
    wait_until(DeadLetter.objects.exists, timeout=30)
    dead = DeadLetter.objects.get()
    assert dead.error_type == "django_pgjobs.worker.TransactionLeftOpen"
    # the next async job of the same worker (on the same ORM lane, reused) runs in autocommit
    demo.record_async.enqueue("next")
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    assert list(Execution.objects.values_list("label", flat=True)) == ["next"]
    worker.kill()


def test_an_async_job_blocking_the_event_loop_past_its_timeout_stops_the_worker(start_worker):
    demo.block_the_loop.enqueue(120)
    worker = start_worker("--shutdown-grace", "2")
    wait_until(DeadLetter.objects.exists, timeout=20)
    assert DeadLetter.objects.get().error_type == "django_pgjobs.JobTimeout"
    demo.record_async.enqueue("waits for a loop that never comes back")
    assert worker.wait(timeout=40) == 3, worker.output()
    assert "event loop of the async jobs is blocked" in worker.output()
    # the job the blocked loop never started went back without spending its attempt
    job = Job.objects.get()
    assert (job.status, job.attempts) == ("ready", 0)


def test_an_async_job_keeps_its_result_as_a_sync_job_does(start_worker):
    from django_pgjobs import get_result

    enqueued = demo.add_async.enqueue(2, 3)
    worker = start_worker("--burst")
    assert worker.wait(timeout=60) == 0, worker.output()
    result = get_result(enqueued.id)
    assert (result.status, result.return_value) == ("successful", {"sum": 5})


def _idle_in_transaction(other_connection) -> int:
    return count(
        other_connection,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND state = 'idle in transaction'",
    )


def test_an_async_transaction_across_awaits_keeps_its_writes_while_others_start(
    start_worker, other_connection
):
    demo.commit_across_awaits.enqueue("across awaits", others=3)
    worker = start_worker()
    # its write is done and its transaction open, waiting at an await
    wait_until(lambda: _idle_in_transaction(other_connection) == 1, timeout=30)
    for index in range(3):
        demo.record_async.enqueue(f"other-{index}")
    demo.leave_transaction_open_async.enqueue("left open")
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    labels = sorted(Execution.objects.values_list("label", flat=True))
    assert labels == ["across awaits", "other-0", "other-1", "other-2"], worker.output()
    # the job that left its transaction open failed its own attempt, and only it
    dead = DeadLetter.objects.get()
    assert (dead.name, dead.error_type) == (
        "testproject.demo.jobs.leave_transaction_open_async",
        "django_pgjobs.worker.TransactionLeftOpen",
    )
    worker.kill()


def _times(label: str, attempt: int) -> list:
    return list(Execution.objects.filter(label=label, attempt=attempt).values_list("at", flat=True))


def test_an_async_job_swallowing_its_timeout_cancellation_is_given_up_on(start_worker):
    demo.ignore_cancellation.using(timeout=0.5).enqueue("ignores")
    worker = start_worker(env={"PGJOBS_MAX_STUCK_THREADS": "2"})
    wait_until(lambda: "given up on" in worker.output(), timeout=20)
    demo.record_async.enqueue("bystander")  # its ORM lane is a new one, its write commits
    # its retry swallows its cancellation too: two stuck tasks reach MAX_STUCK_THREADS
    assert worker.wait(timeout=30) == 3, worker.output()
    output = worker.output()
    assert output.count("still runs 1s after its task was cancelled (it caught") == 2, output
    assert "and 2 async task(s) ignore their cancellation (MAX_STUCK_THREADS=2)" in output
    assert "2 async task(s) still running (cancelled, given up on)" in output
    dead = DeadLetter.objects.get()
    assert (dead.error_type, dead.attempts) == ("django_pgjobs.JobTimeout", 2)
    # given up on a second after its timeout, its lane's connection terminated: the first
    # attempt wrote nothing more, so never next to its own retry (which starts 2.5 s later)
    first, second = _times("ignores", 1), _times("ignores", 2)
    assert first and second
    assert max(first) < min(second)
    assert Execution.objects.filter(label="bystander").count() == 1


def test_an_aborted_async_job_swallowing_its_cancellation_counts_as_stuck(start_worker):
    from django_pgjobs import abort

    enqueued = demo.ignore_cancellation.enqueue("ignores its abort")
    worker = start_worker(env={"PGJOBS_MAX_STUCK_THREADS": "1"})
    wait_until(lambda: Execution.objects.filter(label="ignores its abort").exists(), timeout=20)
    abort(enqueued.id)
    assert worker.wait(timeout=20) == 3, worker.output()
    assert "still runs 1s after its task was cancelled" in worker.output()
    dead = DeadLetter.objects.get()  # its attempt recorded when the worker gave up on it
    assert (dead.error_type, dead.attempts) == ("Aborted", 1)
    assert not Job.objects.exists()


def _backends(prefix: str) -> list[str]:
    labels = Execution.objects.filter(label__startswith=prefix).values_list("label", flat=True)
    return [label.split(":")[1] for label in labels]


def test_async_jobs_running_together_have_a_connection_each_then_reuse_them(start_worker):
    demo.record_backend_async.enqueue_many([(f"together-{i}", 1.0) for i in range(3)])
    worker = start_worker(env={"PGJOBS_TEST_CONN_MAX_AGE": "none"})
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    demo.record_backend_async.enqueue_many([(f"after-{i}",) for i in range(3)])
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    together, after = _backends("together-"), _backends("after-")
    assert len(together) == 3 and len(set(together)) == 3, worker.output()
    # the lanes (and their connections, kept with CONN_MAX_AGE = None) are reused
    assert len(after) == 3 and set(after) <= set(together)
    worker.kill()


def test_a_timed_out_async_job_has_its_own_statement_cancelled(start_worker, other_connection):
    demo.sleep_in_the_database_async.enqueue(30)
    worker = start_worker()
    wait_until(DeadLetter.objects.exists, timeout=20)
    assert DeadLetter.objects.get().error_type == "django_pgjobs.JobTimeout"
    sleeping = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND state = 'active' "
        "AND position('pg_sleep' in query) > 0 AND pid <> pg_backend_pid()"
    )
    # the statement ran on the job's own lane, whose server process the timeout knows
    wait_until(lambda: count(other_connection, sleeping) == 0, timeout=5)
    demo.record_async.enqueue("after it")
    wait_until(lambda: not Job.objects.exists(), timeout=10)
    assert list(Execution.objects.values_list("label", flat=True)) == ["after it"]
    worker.kill()


def test_a_retry_on_the_same_worker_does_not_hide_its_attempt_before_still_running(start_worker):
    # the retry starts 0.05 s after the timeout, before the worker gives up on attempt 1 (1 s)
    demo.ignore_cancellation_retried_at_once.using(timeout=0.5).enqueue("ignores")
    worker = start_worker(env={"PGJOBS_MAX_STUCK_THREADS": "2"})
    # both attempts are given up on: two stuck tasks, exit 3 (before: attempt 1 was forgotten
    # once its retry started, went on writing beside it and was never counted)
    assert worker.wait(timeout=20) == 3, worker.output()
    output = worker.output()
    assert output.count("still runs 1s after its task was cancelled (it caught") == 2, output
    first, second = _times("ignores", 1), _times("ignores", 2)
    assert first and second
    assert max(first) < max(second)  # attempt 1 stopped writing when given up on


def test_a_lane_still_running_a_cancelled_call_serves_no_other_job(start_worker):
    # cancelled at its timeout while its first call sleeps 5 s and its second waits behind it
    demo.block_two_calls.enqueue(5)
    worker = start_worker()
    wait_until(lambda: "still runs 1s after its task was cancelled" in worker.output(), timeout=20)
    demo.record_async.using(timeout=2).enqueue("next job")
    # the next async job gets a lane of its own and runs at once (before: it took the lane of
    # the sleeping call, waited behind it, timed out and was given up on as stuck)
    wait_until(lambda: Execution.objects.filter(label="next job").exists(), timeout=3)
    wait_until(lambda: not Job.objects.exists(), timeout=10)
    assert list(DeadLetter.objects.values_list("error_type", flat=True)) == [
        "django_pgjobs.JobTimeout"
    ]
    assert "record_async" not in worker.output()
    worker.kill()


@pytest.mark.parametrize("how", ["to_thread", "sync_to_async", "run_in_executor"])
def test_a_transaction_left_open_on_the_default_executor_fails_its_job(start_worker, how):
    # asyncio.to_thread, sync_to_async(thread_sensitive=False), run_in_executor(None, ...):
    # the loop's default executor, not the job's ORM lane
    demo.leave_transaction_open_in_a_thread.enqueue("left open", how)
    worker = start_worker()
    wait_until(DeadLetter.objects.exists, timeout=30)
    dead = DeadLetter.objects.get()
    assert dead.error_type == "django_pgjobs.worker.TransactionLeftOpen", dead.reason
    assert "default executor" in str(dead.errors), dead.errors
    # the next call on that pool thread runs in autocommit, not inside the open transaction
    demo.record_in_a_thread.enqueue("next", how)
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    assert list(Execution.objects.values_list("label", flat=True)) == ["next"]
    worker.kill()


def _worker_backends(other_connection) -> int:
    # every client of the test database but this connection: the worker's, and the test's own
    # Django connection (open all along)
    return count(
        other_connection,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )


def test_default_executor_calls_leave_no_connection_open_past_conn_max_age(
    start_worker, other_connection
):
    demo.record_async.enqueue("warm")  # the worker's loop and a lane exist from here on
    worker = start_worker()  # CONN_MAX_AGE = 0 (testproject's settings)
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    time.sleep(0.5)
    baseline = _worker_backends(other_connection)
    # together, so that they spread over the pool's threads
    demo.record_in_a_thread.enqueue_many([(f"thread-{i}", "to_thread", 0.5) for i in range(6)])
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    assert Execution.objects.filter(label__startswith="thread-").count() == 6
    deadline = time.monotonic() + 5
    while _worker_backends(other_connection) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _worker_backends(other_connection) == baseline, worker.output()
    worker.kill()


def test_a_call_stuck_on_the_default_executor_does_not_keep_the_worker_from_exiting(
    start_worker,
):
    demo.sleep_in_a_thread.enqueue(120)
    worker = start_worker()
    wait_until(DeadLetter.objects.exists, timeout=20)
    assert DeadLetter.objects.get().error_type == "django_pgjobs.JobTimeout"
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0, worker.output()
