"""enqueue(): one INSERT on the caller's connection, validated before anything is written (every
rejected input is listed in test_bad_input.py)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import transaction
from django.utils import timezone
from helpers import count

from django_pgjobs import enqueue, enqueue_many, job
from django_pgjobs.models import Job
from testproject.demo.jobs import noop, record, send_welcome_email
from testproject.demo.models import Signup

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_returns_saved_job_with_defaults():
    job = record.enqueue("hello", sleep=0.5)
    assert isinstance(job, Job) and job.pk is not None
    assert job.name == "testproject.demo.jobs.record"
    assert (job.queue, job.priority, job.status, job.attempts) == ("default", 0, "ready", 0)
    assert job.args == ["hello"] and job.kwargs == {"sleep": 0.5}
    assert job.max_attempts == 5
    stored = Job.objects.get(pk=job.pk)
    assert stored.args == ["hello"] and stored.run_after == job.run_after


def test_enqueue_by_name_and_by_function_are_the_same():
    a = enqueue("testproject.demo.jobs.record", "x")
    b = enqueue(record, "x")
    assert a.name == b.name == record.name


def test_rollback_removes_job_and_commit_publishes_it(other_connection):
    with pytest.raises(RuntimeError), transaction.atomic():
        Signup.objects.create(email="rolled@back.example")
        job = send_welcome_email.enqueue(1)
        assert count(other_connection, "SELECT count(*) FROM pgjobs_job WHERE id = %s", job.pk) == 0
        raise RuntimeError("roll back")
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Signup.objects.exists()

    with transaction.atomic():
        signup = Signup.objects.create(email="kept@example.com")
        job = send_welcome_email.enqueue(signup.pk)
        # Not visible to workers before the caller commits ...
        assert count(other_connection, "SELECT count(*) FROM pgjobs_job WHERE id = %s", job.pk) == 0
    # ... and visible right after.
    assert count(other_connection, "SELECT count(*) FROM pgjobs_job WHERE id = %s", job.pk) == 1


def test_using_sets_per_call_options():
    later = timezone.now() + dt.timedelta(hours=1)
    job = record.using(queue="reports", priority=50, run_after=later, max_attempts=9).enqueue("x")
    assert (job.queue, job.priority, job.max_attempts) == ("reports", 50, 9)
    assert job.run_after == later
    delayed = record.using(delay=60).enqueue("y")
    assert 55 < (delayed.run_after - timezone.now()).total_seconds() <= 60
    # the original definition is unchanged
    assert record.enqueue("z").queue == "default"


def test_options_given_later_win_and_reach_enqueue_by_function():
    soon = timezone.now() + dt.timedelta(minutes=5)
    prepared = record.using(queue="reports", delay=3600, keep_result=True)
    later = prepared.using(priority=5, run_after=soon)  # run_after replaces the delay
    job = enqueue(later, "x")
    assert (job.queue, job.priority, job.run_after, job.keep_result) == ("reports", 5, soon, True)
    (many,) = enqueue_many(later.using(queue="bulk"), [("y",)])
    assert (many.queue, many.priority, many.run_after) == ("bulk", 5, soon)
    assert prepared.using(delay=0).enqueue("z").run_after <= timezone.now()  # due at once


def test_unique_key_returns_in_flight_job_instead_of_a_duplicate():
    first = record.using(unique_key="report:7").enqueue("a")
    second = record.using(unique_key="report:7").enqueue("b")
    assert first.pk == second.pk
    assert Job.objects.count() == 1
    Job.objects.filter(pk=first.pk).update(status="successful")
    third = record.using(unique_key="report:7").enqueue("c")
    assert third.pk != first.pk


def test_enqueue_many_is_one_statement(django_assert_num_queries):
    with django_assert_num_queries(1):
        jobs = enqueue_many(record, [("a",), (("b",), {"sleep": 0.1}), ["c"]])
    assert [j.args for j in jobs] == [["a"], ["b"], ["c"]]
    assert jobs[1].kwargs == {"sleep": 0.1}
    assert Job.objects.count() == 3


@job(name="tests.keyed", unique_key=lambda label: f"keyed:{label}")
def keyed(label: str) -> None: ...


def test_enqueue_many_returns_the_saved_jobs_and_skips_keys_in_flight():
    held = keyed.enqueue("b")
    jobs = keyed.enqueue_many([("a",), ("b",), ("c",)])  # "b" is in flight: skipped
    assert [j.args for j in jobs] == [["a"], ["c"]]
    fields = [f.attname for f in Job._meta.concrete_fields]
    for returned in jobs:
        stored = Job.objects.get(pk=returned.pk)
        assert [getattr(returned, f) for f in fields] == [getattr(stored, f) for f in fields]
        assert returned == stored and not returned._state.adding
        assert returned._state.db == "default"
    returned.refresh_from_db()  # a saved instance like any other
    assert Job.objects.filter(unique_key="keyed:b").get() == held
    assert keyed.enqueue_many([("a",), ("c",)]) == []  # all in flight


def test_enqueue_many_validates_everything_first():
    with pytest.raises(TypeError):
        noop.enqueue_many([(), (object(),)])
    assert Job.objects.count() == 0


def test_enqueue_is_one_statement(django_assert_num_queries):
    with django_assert_num_queries(1):
        record.enqueue("x")


@pytest.mark.listen_notify
def test_enqueue_notifies_listeners_of_due_jobs_only(other_connection):
    other_connection.execute("LISTEN pgjobs")
    record.using(queue="soon").enqueue("x")
    record.using(queue="later", delay=3600).enqueue("y")
    payloads = [n.payload for n in other_connection.notifies(timeout=0.5)]
    assert payloads == ["soon"]


def test_arguments_round_trip_as_json():
    payload = {"user": 1, "tags": ["a", "é"], "ratio": 0.5, "none": None, "ok": True}
    job = record.enqueue(json.dumps(payload), sleep=0)
    assert Job.objects.get(pk=job.pk).args == [json.dumps(payload)]


@pytest.mark.listen_notify
def test_a_wake_up_that_fails_after_the_commit_does_not_fail_the_caller(other_connection, caplog):
    """The wake-up of a job enqueued in transaction.atomic() is sent by an on_commit callback;
    when it cannot be sent (here the connection is ended between the commit and the callback),
    the job is committed all the same, the caller sees no error, and the failure is logged (on
    Django 5.2 the logging of a failed robust callback reads the callback's __qualname__)."""
    from django.db import connection

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid

    def end_the_connection() -> None:
        other_connection.execute("SELECT pg_terminate_backend(%s)", [pid])

    with transaction.atomic():
        transaction.on_commit(end_the_connection)  # runs before the wake-up's callback
        job = record.enqueue("woken or not")
    assert other_connection.execute(
        "SELECT count(*) FROM pgjobs_job WHERE id = %s", [job.pk]
    ).fetchone() == (1,)
    assert "in on_commit()" in caplog.text
    connection.close()


@job(name="tests.any_arguments")
def any_arguments(*args, **kwargs) -> None:
    pass


def test_the_returned_job_holds_the_arguments_as_the_row_does():
    """Tuples are JSON arrays: the ``Job`` that ``enqueue()`` and ``enqueue_many()`` return
    holds lists, as the row (and the handler) will, not the caller's tuples."""
    one = any_arguments.using(delay=600).enqueue((1, 2), {"a": (3,)}, k=(4, 5))
    assert (one.args, one.kwargs) == ([[1, 2], {"a": [3]}], {"k": [4, 5]})
    stored = Job.objects.get(pk=one.pk)
    assert (stored.args, stored.kwargs) == (one.args, one.kwargs)
    many = any_arguments.enqueue_many([(((1, 2),), {"k": (3,)})])
    assert (many[0].args, many[0].kwargs) == ([[1, 2]], {"k": [3]})
