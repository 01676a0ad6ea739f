"""Async jobs in real ``runjobs`` processes: slots of their own, connection hygiene, a blocked
event loop."""

from __future__ import annotations

import time

import pytest
from helpers import wait_until

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
    # the next async job of the same worker (same ORM thread) runs in autocommit again
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
