"""Celery's spellings of enqueue (django_pgjobs/celery_calls.py): ``<job>.delay(...)`` and
``<job>.apply_async(...)`` write the row ``enqueue``/``using`` write, in the caller's
transaction, and refuse what they cannot honour."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import transaction
from django.utils import timezone
from helpers import count

from django_pgjobs import enqueue
from django_pgjobs.celery_calls import REFUSED_OPTIONS
from django_pgjobs.models import Job
from testproject.demo.jobs import record, send_welcome_email
from testproject.demo.models import Signup

pytestmark = pytest.mark.django_db(transaction=True)


def visible(other_connection, job: Job) -> int:
    return count(other_connection, "SELECT count(*) FROM pgjobs_job WHERE id = %s", job.pk)


def columns(job: Job) -> tuple:
    row = Job.objects.get(pk=job.pk)
    return (row.name, row.queue, row.priority, row.args, row.kwargs, row.max_attempts)


def test_delay_is_enqueue():
    delayed = record.delay("hello", sleep=0.5)
    enqueued = record.enqueue("hello", sleep=0.5)
    assert isinstance(delayed, Job) and delayed.pk is not None and delayed.status == "ready"
    assert columns(delayed) == columns(enqueued)
    assert columns(delayed)[1:4] == ("default", 0, ["hello"])
    assert delayed.run_after <= timezone.now()  # due at once


@pytest.mark.parametrize("spelling", ["delay", "apply_async"])
def test_commits_and_rolls_back_with_the_caller(other_connection, spelling):
    def call(signup_pk: int) -> Job:
        if spelling == "delay":
            return send_welcome_email.delay(signup_pk)
        return send_welcome_email.apply_async(args=[signup_pk], countdown=0)

    with pytest.raises(RuntimeError), transaction.atomic():
        signup = Signup.objects.create(email="rolled@back.example")
        dropped = call(signup.pk)
        assert visible(other_connection, dropped) == 0
        raise RuntimeError("roll back")
    assert not Job.objects.filter(pk=dropped.pk).exists() and not Signup.objects.exists()

    with transaction.atomic():
        signup = Signup.objects.create(email="kept@example.com")
        kept = call(signup.pk)
        assert visible(other_connection, kept) == 0  # not before the caller commits
    assert visible(other_connection, kept) == 1
    assert Job.objects.get(pk=kept.pk).args == [signup.pk]

    outside = call(signup.pk)  # autocommit: committed at once
    assert visible(other_connection, outside) == 1


def test_apply_async_options_land_in_the_row():
    started = timezone.now()
    job = record.apply_async(
        args=("x",), kwargs={"sleep": 0.1}, countdown=90, queue="reports", priority=9
    )
    row = Job.objects.get(pk=job.pk)
    assert (row.queue, row.priority, row.args, row.kwargs) == ("reports", 9, ["x"], {"sleep": 0.1})
    assert 89 <= (row.run_after - started).total_seconds() <= 91
    eta = timezone.now() + dt.timedelta(hours=2)
    assert Job.objects.get(pk=record.apply_async(["y"], eta=eta).pk).run_after == eta
    # positional args and kwargs, as Celery takes them; no options: the job's own
    plain = record.apply_async(("z",), {"sleep": 0})
    assert columns(plain) == columns(record.enqueue("z", sleep=0))


def test_apply_async_on_a_job_with_options_puts_its_own_on_top():
    prepared = record.using(queue="reports", delay=3600, max_attempts=9, timeout=30)
    job = prepared.apply_async(["x"], countdown=5, priority=-3)
    row = Job.objects.get(pk=job.pk)
    assert (row.queue, row.priority, row.max_attempts, row.timeout) == ("reports", -3, 9, 30)
    assert (row.run_after - row.created_at).total_seconds() <= 6  # the countdown replaced it
    moved = prepared.apply_async(["y"], queue="bulk")
    assert Job.objects.get(pk=moved.pk).queue == "bulk"
    assert (moved.run_after - moved.created_at).total_seconds() > 3500  # .using()'s delay kept
    assert Job.objects.get(pk=prepared.delay("z").pk).max_attempts == 9
    assert enqueue(prepared, "w").queue == "reports"


def test_the_delay_option_of_using_still_works():
    later = record.using(delay=60)
    assert later.options.delay == 60
    for job in (later.enqueue("a"), later.delay("b"), later.apply_async(["c"])):
        assert 55 < (job.run_after - timezone.now()).total_seconds() <= 60


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"countdown": -1}, "apply_async(countdown=...): delay must be a number of seconds"),
        ({"countdown": "soon"}, "apply_async(countdown=...): delay must be a number of seconds"),
        (
            {"eta": dt.datetime(2030, 1, 1)},
            "apply_async(eta=...): run_after must be timezone-aware",
        ),
        ({"eta": "2030-01-01T00:00:00Z"}, "apply_async(eta=...): run_after must be a datetime"),
        ({"countdown": 5, "eta": timezone.now()}, "apply_async(): give either countdown or eta"),
        ({"queue": "no spaces"}, "queue must be 1..100 characters"),
        ({"priority": 101}, "priority must be between -100 and 100, not 101"),
        ({"priority": "high"}, "priority must be an int, not str"),
    ],
)
def test_bad_values_raise_what_enqueue_raises_and_write_nothing(call, message):
    with pytest.raises(ValueError, match=r"^" + re.escape(message)) as raised:
        record.apply_async(["x"], **call)
    if "queue" in call or "priority" in call:  # the very message of .using() and @job
        with pytest.raises(ValueError) as from_using:
            record.using(**call)
        assert str(raised.value) == str(from_using.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (7, None, "apply_async(args=...) must be a list or tuple"),
        ("x", None, "apply_async(args=...) must be a list or tuple"),
        (None, ["x"], "apply_async(kwargs=...) must be a dict"),
        (["x", 1, 2], None, "arguments do not fit testproject.demo.jobs.record"),
        ([dt.date(2030, 1, 1)], None, "args[0]"),
    ],
)
def test_bad_arguments_raise_type_error_and_write_nothing(args, kwargs, message):
    with pytest.raises(TypeError) as raised:
        record.apply_async(args, kwargs)
    assert message in str(raised.value)
    with pytest.raises(TypeError):
        record.delay(*(args if isinstance(args, list) else [1, 2, 3]))
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("option", "guidance"),
    [
        ("expires", "jobs do not expire"),
        ("task_id", ".using(unique_key=...)"),
        ("link", "enqueue the next job at the end of the job"),
        ("link_error", "handle the failure in the job"),
        ("retry", "there is no publish to retry"),
        ("retry_policy", "there is no publish to retry"),
        ("serializer", "always JSON"),
        ("headers", "pass what the job needs as arguments"),
        ("routing_key", "name the queue with queue="),
        ("time_limit", ".using(timeout=...)"),
        ("soft_time_limit", "there is no soft limit"),
        ("ignore_result", "keep_result"),
        ("timeout", "it is an option of .using(): <job>.using(timeout=...).apply_async(...)"),
        ("unique_key", "<job>.using(unique_key=...)"),
        ("run_after", "<job>.using(run_after=...)"),
        ("producer", "not an option here: apply_async() takes args, kwargs, countdown, eta"),
    ],
)
def test_celery_options_without_a_meaning_here_are_refused_with_guidance(option, guidance):
    with pytest.raises(TypeError) as raised:
        record.apply_async(["x"], **{option: 1})
    assert str(raised.value).startswith(f"apply_async() does not take {option}=: ")
    assert guidance in str(raised.value)
    with pytest.raises(TypeError):  # also on a job with options
        record.using(queue="reports").apply_async(["x"], **{option: 1})
    assert not Job.objects.exists()


def test_every_refused_option_names_what_to_use_instead():
    for option, guidance in REFUSED_OPTIONS.items():
        assert len(guidance) > 30, option
    with pytest.raises(TypeError, match="expires=: .*; link=: .*; task_id=: "):
        record.apply_async(["x"], task_id="a", link=None, expires=60)
