"""Aborting jobs (``django_pgjobs.abort``, ``abort_jobs`` in queries.sql, the admin's "Abort"):
what each state of a job becomes, and that an abort requested is never undone by a retry, a
hand-back or the rescue of a dead worker's job."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest
from admin_data import job, make_user, said
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from helpers import database_url_for_tests, run_worker

from django_pgjobs import Aborted, abort, operations
from django_pgjobs.db import jobs_connection
from django_pgjobs.errors import stored_type
from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pgjobs_job_changelist")


def running(**fields) -> Job:
    fields.setdefault("lease_expires_at", timezone.now() + timedelta(minutes=1))
    return job(status="running", attempts=1, claim_token=uuid.uuid4(), worker="w", **fields)


def test_abort_requests_running_cancels_waiting_and_reports_the_rest():
    busy, due = running(), job()
    scheduled = job(run_after=timezone.now() + timedelta(hours=1))
    done = job(status="successful", attempts=1, finished_at=timezone.now())
    result = abort([busy.pk, due, scheduled.pk, done.pk, 999_999, busy.pk])
    assert result.requested == [busy.pk]
    assert result.cancelled == sorted([due.pk, scheduled.pk])
    assert result.not_found == [done.pk, 999_999]
    busy.refresh_from_db()
    assert busy.status == "running" and busy.abort_requested_by == "django_pgjobs.abort()"
    first = busy.abort_requested_at
    assert first is not None
    assert abort(busy.pk, requested_by="someone else").requested == [busy.pk]  # idempotent
    busy.refresh_from_db()
    assert (busy.abort_requested_at, busy.abort_requested_by) == (first, "django_pgjobs.abort()")


def test_abort_tells_each_worker_its_jobs_within_notifys_limit_whatever_the_ids():
    """NOTIFY refuses a payload of 8,000 bytes: 800 running jobs of two workers, ids of 19
    digits, are told in notifications of one worker's ids each, every one under the limit."""
    big = 10**18
    Job.objects.bulk_create(
        Job(
            id=big + i,
            name="testproject.demo.jobs.record",
            queue="default",
            status="running",
            attempts=1,
            claim_token=uuid.uuid4(),
            worker=f"w{i % 2}",
            lease_expires_at=timezone.now() + timedelta(minutes=1),
        )
        for i in range(800)
    )
    with psycopg.connect(database_url_for_tests(), autocommit=True) as listening:
        listening.execute("LISTEN pgjobs_abort")
        assert len(abort([big + i for i in range(800)]).requested) == 800
        payloads = [n.payload for n in listening.notifies(timeout=5, stop_after=4)]
    told = [[int(part) for part in payload.split(",")] for payload in payloads]
    assert max(len(payload.encode()) for payload in payloads) < 8000
    assert all(len({i % 2 for i in ids}) == 1 for ids in told)  # one worker's ids each
    assert sorted(i for ids in told for i in ids) == [big + i for i in range(800)]
    assert len(told) == 4  # 400 ids a worker: two notifications each


def test_abort_takes_effect_with_the_callers_transaction():
    due, busy = job(), running()
    with transaction.atomic():
        assert abort([due.pk, busy.pk]).cancelled == [due.pk]
        transaction.set_rollback(True)
    assert Job.objects.filter(pk=due.pk).exists()
    assert Job.objects.get(pk=busy.pk).abort_requested_at is None


@pytest.mark.parametrize("bad", ["12", 1.5, True, [1, "2"], None])
def test_abort_refuses_what_is_not_a_job_id(bad):
    due = job()
    with pytest.raises(TypeError, match=f"job ids must be ints, not {bad!r}|not '2'"):
        abort(bad)
    with pytest.raises(TypeError, match="requested_by"):
        abort(due.pk, requested_by="")
    assert Job.objects.filter(pk=due.pk).exists()


def test_a_failure_after_an_abort_the_worker_has_not_heard_of_is_aborted_not_retried():
    # no LISTEN and no heartbeat within the run: only the retry statement can notice
    failing = job(name="testproject.demo.jobs.abort_self_then_fail", args=["self"])
    run_worker(listen=False)
    dead = DeadLetter.objects.get(job_id=failing.pk)
    assert dead.error_type == "Aborted" and dead.attempts == 1
    assert dead.reason.startswith("aborted at the request of the job itself (")
    assert dead.reason.endswith("ValueError: failed after its abort was requested")
    assert Execution.objects.filter(label="self").count() == 1
    assert not Job.objects.exists()


def test_a_job_handed_back_after_its_abort_was_requested_never_starts():
    # as release_jobs leaves it: ready again, its abort still requested
    handed_back = job(
        args=["never"], abort_requested_at=timezone.now(), abort_requested_by="operator"
    )
    run_worker(listen=False)
    dead = DeadLetter.objects.get(job_id=handed_back.pk)
    assert dead.error_type == "Aborted"
    assert dead.errors[-1]["type"] == "django_pgjobs.Aborted"
    assert not Execution.objects.filter(label="never").exists()


def test_a_job_that_raises_aborted_itself_is_not_retried():
    assert issubclass(Aborted, Exception) and stored_type(Aborted) == "django_pgjobs.Aborted"
    held = running(max_attempts=5)
    claimed = operations.ClaimedJob(
        id=held.pk,
        name=held.name,
        queue=held.queue,
        priority=0,
        args=[],
        kwargs={},
        attempts=1,
        max_attempts=5,
        run_after=held.run_after,
        created_at=held.created_at,
        claim_token=held.claim_token,
    )
    claimed.raise_if_aborted()  # nothing requested: no error
    claimed.abort_requested = True
    with pytest.raises(Aborted):
        claimed.raise_if_aborted()
    error = {"type": "django_pgjobs.Aborted", "message": "stop"}
    assert operations.retry_job(jobs_connection(), claimed, error, 1.0)  # no request stored
    assert Job.objects.get(pk=held.pk).status == "ready"


def test_rescue_dead_letters_an_expired_job_whose_abort_was_requested():
    expired = timezone.now() - timedelta(seconds=5)
    asked = running(lease_expires_at=expired, max_attempts=5)
    plain = running(lease_expires_at=expired, max_attempts=5)
    abort(asked.pk, requested_by="operator")
    assert operations.rescue_expired(jobs_connection()) == (1, 1)
    dead = DeadLetter.objects.get(job_id=asked.pk)
    assert dead.error_type == "Aborted"
    assert dead.reason.startswith("aborted at the request of operator: the lease expired")
    assert Job.objects.get(pk=plain.pk).status == "ready"  # the other one is retried as before


def test_heartbeat_says_which_held_jobs_have_an_abort_requested():
    asked, quiet = running(), running()
    abort(asked.pk)
    jobs = [claimed_of(asked), claimed_of(quiet)]
    beat = operations.heartbeat(jobs_connection(), jobs)
    assert beat == ({asked.pk, quiet.pk}, {asked.pk}, set())


def test_admin_abort_is_offered_for_running_jobs_and_acts_on_them_only(superuser):
    client = Client()
    client.force_login(superuser)
    busy, due = running(), job()
    page = client.get(JOBS + "?view=running").content.decode()
    assert 'value="abort"' in page
    assert 'value="abort"' not in client.get(JOBS + "?view=due").content.decode()
    response = client.post(
        JOBS,
        {"action": "abort", "_selected_action": [busy.pk, due.pk], "index": 0, "post": "yes"},
    )
    assert said(response) == [
        "Abort requested for 1 running job. 1 selected job was left alone "
        "(only running jobs qualify)."
    ]
    assert Job.objects.get(pk=busy.pk).abort_requested_by == "admin user 'root'"
    assert Job.objects.get(pk=due.pk).abort_requested_at is None  # not cancelled either

    detail = client.get(reverse("admin:django_pgjobs_job_change", args=[busy.pk])).content
    assert b">Abort<" in detail
    other = running()
    act = reverse("admin:django_pgjobs_job_act", args=[other.pk, "abort"])
    assert client.get(act).status_code == 405  # a change is a POST
    response = client.post(act, {"confirmed": "yes"})
    assert said(response) == ["Abort requested for 1 running job."]
    refused = client.post(
        reverse("admin:django_pgjobs_job_act", args=[due.pk, "abort"]), {"confirmed": "yes"}
    )
    assert "is not possible" in said(refused)[-1]


def test_admin_abort_needs_the_change_permission():
    busy = running()
    act = reverse("admin:django_pgjobs_job_act", args=[busy.pk, "abort"])
    viewer = Client()
    viewer.force_login(make_user("viewer", perms=("view_job",)))
    assert viewer.post(act, {"confirmed": "yes"}).status_code == 403
    bulk = {"action": "abort", "_selected_action": [busy.pk], "index": 0, "post": "yes"}
    viewer.post(JOBS, bulk)
    assert Job.objects.get(pk=busy.pk).abort_requested_at is None
    operator = Client()
    operator.force_login(make_user("operator", perms=("view_job", "change_job")))
    assert operator.post(act, {"confirmed": "yes"}).status_code == 302
    assert Job.objects.get(pk=busy.pk).abort_requested_by == "admin user 'operator'"


def claimed_of(row: Job) -> operations.ClaimedJob:
    return operations.ClaimedJob(
        id=row.pk,
        name=row.name,
        queue=row.queue,
        priority=0,
        args=[],
        kwargs={},
        attempts=1,
        max_attempts=row.max_attempts,
        run_after=row.run_after,
        created_at=row.created_at,
        claim_token=row.claim_token,
        lease_seconds=60.0,
    )
