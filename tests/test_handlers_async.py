"""docs/howto/handlers.md, "Async handlers", run by real ``runjobs`` processes."""

from __future__ import annotations

import signal

import pytest
from django.db import transaction
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter
from testproject.handlers.async_jobs import add_points_later, call_flaky_service

pytestmark = pytest.mark.django_db(transaction=True)


def test_ten_async_jobs_run_and_commit_their_orm_writes(start_worker):
    with transaction.atomic():
        for index in range(10):
            Counter.objects.create(name=f"async-{index}")
            add_points_later.enqueue(f"async-{index}", index + 1, pause=0.2)
    worker = start_worker("--queue", "async-handlers", "--burst", "--concurrency", "1")
    assert worker.wait(timeout=60) == 0, worker.output()
    values = dict(Counter.objects.values_list("name", "value"))
    assert values == {f"async-{index}": index + 1 for index in range(10)}
    assert not Job.objects.exists()
    output = worker.output()
    assert "async=32" in output, output
    assert "succeeded=10" in output, output


def test_an_async_job_that_raises_is_retried_then_dead_lettered(start_worker):
    call_flaky_service.enqueue("flaky")
    worker = start_worker("--queue", "async-handlers")
    wait_until(DeadLetter.objects.exists, timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    dead = DeadLetter.objects.get()
    assert dead.attempts == 2
    assert dead.error_type == "ConnectionError"
    assert [e["message"] for e in dead.errors] == [
        "service unavailable (attempt 1)",
        "service unavailable (attempt 2)",
    ]
    for entry in dead.errors:
        assert "Traceback" in entry["traceback"]
        assert "in call_flaky_service" in entry["traceback"]
    names = set(Counter.objects.values_list("name", flat=True))
    assert names == {"flaky-attempt-1", "flaky-attempt-2"}  # its ORM writes ran (autocommit)
