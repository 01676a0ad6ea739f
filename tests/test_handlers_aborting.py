"""docs/howto/handlers.md, "Aborting a running job", run by real ``runjobs`` processes: an abort
from the admin (or ``django_pgjobs.abort()``) stops a sync job that polls for it, the attempt
ends in the dead letters as aborted and is not retried, and the worker goes on with other jobs."""

from __future__ import annotations

import signal
import time

import pytest
from admin_data import said
from django.urls import reverse
from helpers import wait_until, wait_until_listening

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter
from testproject.handlers.aborting import (
    recount,
    recount_async,
    recount_to_the_end,
    stop_recount,
)
from testproject.handlers.basics import add_points

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pgjobs_job_changelist")
STEPS = 1200  # a minute of work at 0.05 s a step: only an abort ends it within the test


def started(counter: str, at_least: int = 1) -> bool:
    return Counter.objects.get(name=counter).value >= at_least


def test_abort_from_the_admin_stops_a_running_job_and_the_worker_goes_on(
    client,
    superuser,
    start_worker,
):
    Counter.objects.create(name="long")
    Counter.objects.create(name="after")
    long = recount.enqueue("long", STEPS)
    # heartbeats far apart: the worker can only learn of the abort in time through LISTEN
    worker = start_worker(
        "--queue", "handlers", "--concurrency", "1", env={"PGJOBS_HEARTBEAT_SECONDS": "30"}
    )
    wait_until(lambda: started("long"), timeout=60)
    wait_until_listening()  # the abort's NOTIFY reaches it, not only its heartbeat

    client.force_login(superuser)
    response = client.post(
        JOBS + "?view=running",
        {"action": "abort", "_selected_action": [str(long.pk)], "index": 0, "post": "yes"},
    )
    assert said(response) == ["Abort requested for 1 running job."]
    wait_until(lambda: DeadLetter.objects.filter(job_id=long.pk).exists(), timeout=20)
    dead = DeadLetter.objects.get(job_id=long.pk)
    assert dead.error_type == "Aborted"
    assert dead.reason.startswith("aborted at the request of admin user 'root'")
    assert dead.attempts == 1 and dead.errors[-1]["type"] == "django_pgjobs.Aborted"
    assert not Job.objects.filter(pk=long.pk).exists()  # not retried
    stopped_at = Counter.objects.get(name="long").value
    assert 0 < stopped_at < STEPS

    add_points.enqueue("after", 7)  # the same worker (one executor) takes the next job
    wait_until(lambda: started("after", 7), timeout=30)
    time.sleep(0.3)
    assert Counter.objects.get(name="long").value == stopped_at  # it did stop
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert "abort requested" in worker.output()


def test_a_worker_that_does_not_listen_learns_of_the_abort_at_its_heartbeat(start_worker):
    Counter.objects.create(name="quiet")
    long = recount.enqueue("quiet", STEPS)
    worker = start_worker(
        "--queue", "handlers", "--no-listen", env={"PGJOBS_HEARTBEAT_SECONDS": "0.5"}
    )
    wait_until(lambda: started("quiet"), timeout=60)
    requested = time.monotonic()
    result = stop_recount(long.pk)
    assert (result.requested, result.cancelled, result.not_found) == ([long.pk], [], [])
    wait_until(lambda: DeadLetter.objects.filter(job_id=long.pk).exists(), timeout=30)
    assert time.monotonic() - requested < 10  # a heartbeat or two, not the minute of work
    dead = DeadLetter.objects.get(job_id=long.pk)
    assert dead.error_type == "Aborted"
    assert dead.reason.startswith("aborted at the request of support desk")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()


def test_an_abort_cancels_a_running_async_job(start_worker):
    Counter.objects.create(name="async")
    long = recount_async.enqueue("async", STEPS)
    worker = start_worker("--queue", "handlers", env={"PGJOBS_HEARTBEAT_SECONDS": "30"})
    wait_until(lambda: started("async"), timeout=60)
    wait_until_listening()  # the abort's NOTIFY reaches it, not only its heartbeat
    assert stop_recount(long.pk).requested == [long.pk]
    wait_until(lambda: DeadLetter.objects.filter(job_id=long.pk).exists(), timeout=20)
    dead = DeadLetter.objects.get(job_id=long.pk)
    assert dead.error_type == "Aborted" and dead.attempts == 1
    assert dead.reason.startswith("aborted at the request of support desk")
    assert dead.errors[-1]["type"] == "django_pgjobs.Aborted"
    stopped_at = Counter.objects.get(name="async").value
    time.sleep(0.3)
    assert Counter.objects.get(name="async").value == stopped_at < STEPS
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert "(its task was cancelled)" in worker.output()


def test_a_job_that_ignores_the_abort_and_returns_has_succeeded(start_worker):
    Counter.objects.create(name="whole")
    whole = recount_to_the_end.enqueue("whole", 40)  # two seconds
    worker = start_worker("--queue", "handlers")
    wait_until(lambda: started("whole"), timeout=60)
    wait_until_listening()  # the abort's NOTIFY reaches it, not only its heartbeat
    assert stop_recount(whole.pk).requested == [whole.pk]
    wait_until(lambda: not Job.objects.filter(pk=whole.pk).exists(), timeout=30)
    assert not DeadLetter.objects.exists()
    assert Counter.objects.get(name="whole").value == -40  # ran to the end, saw the request
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()


def test_aborting_a_waiting_job_cancels_it_and_unknown_ids_are_reported(start_worker):
    Counter.objects.create(name="never")
    waiting = recount.using(delay=3600).enqueue("never", 1)
    result = stop_recount(waiting.pk)
    assert (result.requested, result.cancelled, result.not_found) == ([], [waiting.pk], [])
    assert not Job.objects.exists()
    again = stop_recount(waiting.pk)  # gone: a no-op, and said so
    assert (again.requested, again.cancelled, again.not_found) == ([], [], [waiting.pk])
