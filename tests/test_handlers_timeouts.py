"""docs/howto/handlers.md, "Long-running jobs and timeouts", run by real ``runjobs`` processes."""

from __future__ import annotations

import re
import signal
import time

import pytest
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Execution
from testproject.handlers.timeouts import call_slow_api, poll_slow_api, quick_report, write_slowly

pytestmark = pytest.mark.django_db(transaction=True)


def _dead_letter_within(seconds: float) -> DeadLetter:
    wait_until(DeadLetter.objects.exists, timeout=seconds, interval=0.05)
    return DeadLetter.objects.get()


@pytest.mark.parametrize("handler", [call_slow_api, poll_slow_api], ids=["sync", "async"])
def test_a_job_past_its_timeout_is_retried_then_dead_lettered(start_worker, handler):
    handler.enqueue(30)
    worker = start_worker("--queue", "timeouts", "--concurrency", "2")
    started = time.monotonic()
    wait_until(lambda: "started" in worker.output(), timeout=30)
    # while the slow job runs past its time, the worker keeps running others
    for index in range(6):
        quick_report.enqueue(f"bystander-{index}")
    dead = _dead_letter_within(20)
    elapsed = time.monotonic() - started
    assert elapsed < 20
    assert dead.attempts == 2
    assert dead.error_type == "django_pgjobs.JobTimeout"
    assert "timed out after 1 s" in dead.reason
    assert [e["type"] for e in dead.errors] == ["django_pgjobs.JobTimeout"] * 2
    assert all(e["message"].startswith("timed out after 1 s") for e in dead.errors)
    wait_until(lambda: not Job.objects.exists(), timeout=20)  # the bystanders ran
    assert worker.popen.poll() is None  # still running
    # the log line says where a stuck thread is, in a sentence that ends (the stack is in the
    # error entry)
    where = (
        r", its thread still running at call_slow_api \(\S+timeouts\.py:\d+\)"
        if handler is call_slow_api
        else ""
    )
    retried = rf"\(attempt 1/2\): django_pgjobs\.JobTimeout: timed out after 1 s{where}; retrying"
    assert re.search(retried, worker.output()), worker.output()
    assert "running:;" not in worker.output()
    worker.signal(signal.SIGTERM)
    # a stuck sync thread does not hold up the exit
    assert worker.wait(timeout=30) == 0, worker.output()


def test_using_timeout_is_stored_on_the_row_and_applies_to_that_call(start_worker):
    slow = quick_report.using(timeout=0.5)
    assert slow.enqueue("x").timeout == 0.5
    assert Job.objects.get().timeout == 0.5
    Job.objects.all().delete()
    call_slow_api.using(timeout=0.5, max_attempts=1).enqueue(30)
    worker = start_worker("--queue", "timeouts")
    dead = _dead_letter_within(20)
    assert dead.timeout == 0.5  # copied to the dead letter
    assert "timed out after 0.5 s" in dead.reason
    assert "time.sleep(seconds)" in dead.errors[0]["message"]  # where the thread was stuck
    assert "\nStack of that thread (most recent call last):\n" in dead.errors[0]["message"]
    assert re.fullmatch(
        r"attempts exhausted \(1/1\): django_pgjobs\.JobTimeout: timed out after 0\.5 s, its "
        r"thread still running at call_slow_api \(\S+timeouts\.py:\d+\)",
        dead.reason,
    ), dead.reason
    worker.kill()


def test_stuck_threads_reaching_the_limit_stop_the_worker_with_status_3(start_worker):
    for _ in range(2):
        call_slow_api.using(max_attempts=1).enqueue(60)
    worker = start_worker(
        "--queue",
        "timeouts",
        "--concurrency",
        "2",
        env={"PGJOBS_MAX_STUCK_THREADS": "2"},
    )
    assert worker.wait(timeout=40) == 3, worker.output()
    assert "stuck in timed-out jobs" in worker.output()
    assert DeadLetter.objects.count() == 2


def test_an_async_jobs_retry_never_writes_beside_its_timed_out_attempt(start_worker):
    """The timed-out attempt's call in a thread (sync_to_async) runs on after its task is
    cancelled, writing and committing until it returns; the retry is not due until the task is
    given up on (its sessions ended). With a retry due 0.1 s after the timeout, the two
    attempts wrote side by side."""
    job = write_slowly.enqueue(6)  # 1.8 s of writes against a 1 s timeout
    worker = start_worker("--queue", "timeouts", "--concurrency", "2", "--poll-interval", "0.1")
    _dead_letter_within(30)
    wait_until(lambda: Execution.objects.filter(attempt=2).count() == 6, timeout=10)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    rows = Execution.objects.filter(job_id=job.pk)
    first = max(rows.filter(attempt=1).values_list("at", flat=True))
    second = min(rows.filter(attempt=2).values_list("at", flat=True))
    assert first < second, (first, second)
