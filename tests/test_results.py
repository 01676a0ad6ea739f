"""Kept results and ``get_result``: real ``runjobs`` processes store the return values of jobs
that ask for it (docs/howto/handlers.md, "Results"); the pruning unit keeps them until
``KEEP_RESULTS_SECONDS``."""

from __future__ import annotations

import signal
import time
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from helpers import run_worker, wait_until

from django_pgjobs import (
    JobResult,
    JobResultDoesNotExist,
    aget_result,
    enqueue,
    get_result,
    job,
    operations,
)
from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution
from testproject.handlers.results import add_and_report, checked_at, count_words, report_time

pytestmark = pytest.mark.django_db(transaction=True)


@job(name="tests.results.write_then_return_an_object", atomic=True, keep_result=True)
def write_then_return_an_object(name: str) -> object:
    Counter.objects.create(name=name)
    return object()


def test_results_are_kept_by_the_jobs_that_ask(start_worker):
    with transaction.atomic():
        Counter.objects.create(name="ada", value=5)
        words = count_words.enqueue("the quick brown fox")
        atomic = add_and_report.enqueue("ada", 10)
    asked = checked_at.using(keep_result=True).enqueue("ada")
    plain = checked_at.enqueue("bob")
    assert (words.keep_result, atomic.keep_result, asked.keep_result) == (True, True, True)
    assert plain.keep_result is False

    worker = start_worker("--queue", "handlers", "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()

    result = get_result(words.id)
    assert isinstance(result, JobResult)
    assert result.status == "successful" and result.is_finished
    assert result.return_value == {"words": 4, "longest": "quick"}
    assert (result.name, result.queue, result.args, result.kwargs) == (
        count_words.name,
        "handlers",
        ["the quick brown fox"],
        {},
    )
    assert (result.attempts, result.max_attempts, result.errors) == (1, 5, [])
    assert result.keep_result is True
    assert len(result.worker_ids) == 1 and str(worker.pid) in result.worker_ids[0]
    assert result.enqueued_at <= result.started_at <= result.finished_at
    # atomic: the counter's update and the result committed together
    assert get_result(atomic.id).return_value == 15 == Counter.objects.get(name="ada").value
    assert get_result(asked.id).return_value.startswith("ada checked at ")
    with pytest.raises(JobResultDoesNotExist):  # succeeded without keep_result: deleted
        get_result(plain.id)
    assert Job.objects.get(id=words.id).result == {"words": 4, "longest": "quick"}


def test_a_return_value_that_is_not_json_is_a_failed_attempt(start_worker):
    job = report_time.enqueue()
    worker = start_worker("--queue", "handlers", "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()
    result = get_result(job.id)
    assert result.status == "failed" and result.return_value is None
    (error,) = result.errors
    assert error["type"] == "django_pgjobs.payload.ResultNotJSON"
    assert "the return value is a datetime.datetime, which is not JSON" in error["message"]
    assert result.worker_ids == [error["worker"]] and str(worker.pid) in error["worker"]
    assert result.finished_at is not None and result.run_after is None
    dead = DeadLetter.objects.get(job_id=job.id)
    assert dead.keep_result is True and "its result cannot be stored, not retried" in dead.reason
    assert (dead.attempts, dead.max_attempts) == (1, 5)  # dead-lettered at its first attempt


def test_a_result_that_cannot_be_stored_is_dead_lettered_without_running_again(start_worker):
    """ResultNotJSON is deterministic and comes after the job's work: retrying would repeat its
    side effects and fail the same way. A real worker, with 3 attempts and a 0.1 s backoff."""
    queued = demo.record_then_return_a_set.enqueue("once")
    worker = start_worker("--queue", "default")
    wait_until(
        lambda: (
            DeadLetter.objects.filter(job_id=queued.id).exists() or worker.popen.poll() is not None
        )
    )
    time.sleep(0.5)  # a retry would be due by now
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert Execution.objects.filter(label="once").count() == 1, worker.output()
    dead = DeadLetter.objects.get(job_id=queued.id)
    assert (dead.attempts, dead.max_attempts) == (1, 3)
    assert dead.error_type == "django_pgjobs.payload.ResultNotJSON"
    assert dead.reason.startswith("its result cannot be stored, not retried")
    assert "the return value is a builtins.set, which is not JSON" in dead.reason
    assert not Job.objects.exists()


def test_an_atomic_job_whose_result_is_not_json_rolls_back_its_writes():
    queued = write_then_return_an_object.using(max_attempts=1).enqueue("never")
    run_worker()
    dead = DeadLetter.objects.get(job_id=queued.id)
    assert dead.error_type == "django_pgjobs.payload.ResultNotJSON"
    assert "the return value is a builtins.object, which is not JSON" in dead.errors[0]["message"]
    assert not Counter.objects.filter(name="never").exists()


def test_none_is_kept_as_a_null_result():
    job = demo.record_atomic.using(keep_result=True).enqueue("x")  # returns None
    run_worker(concurrency=1)
    assert get_result(job.id).status == "successful"
    assert get_result(job.id).return_value is None
    assert Job.objects.get(id=job.id).result is None


def test_get_result_for_ready_and_running_jobs(start_worker):
    job = demo.record.using(keep_result=True).enqueue("slow", sleep=4)
    ready = get_result(job.id)
    assert (ready.status, ready.attempts, ready.worker_ids, ready.started_at) == (
        "ready",
        0,
        [],
        None,
    )
    assert ready.run_after is not None and ready.finished_at is None and not ready.is_finished
    worker = start_worker("--queue", "default")
    wait_until(lambda: get_result(job.id).status == "running", timeout=60)
    running = get_result(job.id)
    assert running.attempts == 1 and running.started_at is not None
    assert len(running.worker_ids) == 1 and str(worker.pid) in running.worker_ids[0]
    wait_until(lambda: get_result(job.id).status == "successful", timeout=60)
    assert async_to_sync(aget_result)(job.id).status == "successful"


def test_get_result_of_a_missing_id_and_bad_ids():
    with pytest.raises(JobResultDoesNotExist, match="no job #987654"):
        get_result(987654)
    assert issubclass(JobResultDoesNotExist, LookupError)
    with pytest.raises(TypeError):
        get_result("12")  # type: ignore[arg-type]
    with pytest.raises(JobResultDoesNotExist):
        async_to_sync(aget_result)(987654)


def test_kept_results_survive_pruning_until_keep_results_seconds(settings):
    kept = enqueue(count_words, "a b")
    plain = demo.noop.enqueue()
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": 60}
    run_worker()
    assert Job.objects.filter(status="successful").count() == 2
    # both finished two minutes ago: past KEEP_SUCCEEDED_SECONDS, within KEEP_RESULTS_SECONDS
    Job.objects.update(finished_at=Job.objects.get(id=kept.id).finished_at - timedelta(minutes=2))
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_RESULTS_SECONDS": 3600}
    run_worker()  # the pruning unit runs when a worker starts
    assert get_result(kept.id).return_value == {"words": 2, "longest": "a"}
    assert not Job.objects.filter(id=plain.id).exists()
    # with retention of plain jobs off, kept results are still pruned by their own period
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": 0, "KEEP_RESULTS_SECONDS": 90}
    run_worker()
    with pytest.raises(JobResultDoesNotExist):
        get_result(kept.id)


def test_storing_a_result_is_fenced_by_the_claim_token():
    job = count_words.enqueue("x")
    claims = operations.ClaimBuilder(worker="w", queues=["handlers"], lease_seconds=60)
    (claimed,) = operations.complete(connection, claim=claims.take(1)).claimed
    assert claimed.keep_result is True
    stale = operations.ClaimedJob(**{**claimed.__dict__, "claim_token": uuid.uuid4()})
    assert operations.complete(connection, [stale], results=['"stale"']).ids == set()
    with pytest.raises(ValueError, match="1 jobs to complete, 2 results"):
        operations.complete(connection, [claimed], results=['"ok"', '"more"'])
    assert operations.complete(connection, [claimed], results=['"ok"']).ids == {job.id}
    assert get_result(job.id).return_value == "ok"


def test_a_claim_carries_completions_that_keep_their_result():
    first, second = count_words.enqueue("a b"), count_words.enqueue("c")
    claims = operations.ClaimBuilder(worker="w", queues=["handlers"], lease_seconds=60)
    (claimed,) = operations.complete(connection, claim=claims.take(1)).claimed
    stale = operations.ClaimedJob(**{**claimed.__dict__, "claim_token": uuid.uuid4()})
    completed, more = operations.complete(
        connection, [claimed, stale], results=["2", "0"], claim=claims.take(5)
    )
    assert completed == {first.id} and [job.id for job in more] == [second.id]
    assert get_result(first.id).return_value == 2
    assert Job.objects.get(pk=second.id).status == "running"


def test_requeued_dead_letters_keep_asking_for_their_result():
    dead = DeadLetter.objects.create(
        job_id=1,
        name=count_words.name,
        queue="handlers",
        args=["a"],
        reason="x",
        created_at=Job.objects.model._meta.get_field("created_at").default(),
        keep_result=True,
    )
    (new_id,) = operations.requeue_dead_letters(connection, [dead.id])
    assert Job.objects.get(id=new_id).keep_result is True
