"""Operator actions: each goes through operations, only where valid, and says what it did."""

from __future__ import annotations

from datetime import timedelta

import pytest
from admin_data import dead_letter, job, said
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from helpers import run_worker

from django_pgjobs import operations
from django_pgjobs.models import DeadLetter, Job, QueueState

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pgjobs_job_changelist")
DEAD = reverse("admin:django_pgjobs_deadletter_changelist")
QUEUES = reverse("admin:django_pgjobs_queuestate_changelist")


def later(**delta):
    return timezone.now() + timedelta(**delta)


def messages_of(response) -> list[str]:
    return said(response)


def bulk(client, url, action, ids, **extra):
    return client.post(
        url,
        # post: the answer of the confirmation page of the actions that ask first
        {"action": action, "_selected_action": [str(i) for i in ids], "index": 0, "post": "yes"}
        | extra,
    )


def job_act(pk, action):
    return reverse("admin:django_pgjobs_job_act", args=[pk, action])


def dead_act(pk, action):
    return reverse("admin:django_pgjobs_deadletter_act", args=[pk, action])


def test_bulk_run_now_makes_scheduled_jobs_due_and_counts_the_rest(admin_client):
    scheduled = [job(args=[i], run_after=later(hours=2)) for i in range(3)]
    running = job(status="running", attempts=1, lease_expires_at=later(minutes=1))
    response = bulk(admin_client, JOBS, "run_now", [j.pk for j in scheduled] + [running.pk])
    assert messages_of(response) == [
        "Set 3 jobs to run now. 1 selected job was left alone (only scheduled jobs qualify)."
    ]
    assert all(j.view == "due" for j in Job.objects.filter(pk__in=[j.pk for j in scheduled]))
    assert Job.objects.get(pk=running.pk).status == "running"


def test_bulk_retry_now(admin_client):
    retrying = [job(args=[i], attempts=1, run_after=later(minutes=10)) for i in range(2)]
    response = bulk(admin_client, JOBS + "?view=retrying", "retry_now", [j.pk for j in retrying])
    assert messages_of(response) == ["Set 2 jobs to retry now."]
    assert Job.objects.filter(run_after__lte=timezone.now()).count() == 2


def test_bulk_cancel_deletes_waiting_jobs_only(admin_client):
    waiting = [job(args=[i]) for i in range(4)]
    running = job(status="running", attempts=1, lease_expires_at=later(minutes=1))
    response = bulk(admin_client, JOBS, "cancel", [j.pk for j in waiting] + [running.pk])
    assert messages_of(response)[0].startswith("Cancelled 4 jobs. 1 selected job was left alone")
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]


def test_bulk_select_across_acts_on_the_whole_filter(admin_client):
    for i in range(7):
        job(args=[i], queue="bulk", run_after=later(hours=1))
    job(args=["other"], queue="other", run_after=later(hours=1))
    first = Job.objects.filter(queue="bulk").first()
    response = bulk(
        admin_client, JOBS + "?queue=bulk&view=scheduled", "run_now", [first.pk], select_across="1"
    )
    assert messages_of(response) == ["Set 7 jobs to run now."]
    assert Job.objects.get(queue="other").view == "scheduled"


def test_single_job_actions(admin_client):
    scheduled = job(run_after=later(hours=1))
    response = admin_client.post(job_act(scheduled.pk, "run_now"))
    assert response.status_code == 302 and messages_of(response) == ["Set 1 job to run now."]
    assert Job.objects.get(pk=scheduled.pk).view == "due"

    retrying = job(attempts=2, run_after=later(hours=1))
    admin_client.post(job_act(retrying.pk, "retry_now"))
    assert Job.objects.get(pk=retrying.pk).run_after <= timezone.now()

    response = admin_client.post(job_act(retrying.pk, "cancel"), {"confirmed": "yes"})
    assert response["Location"] == JOBS
    assert not Job.objects.filter(pk=retrying.pk).exists()


def test_single_job_action_refused_where_not_valid(admin_client):
    running = job(status="running", attempts=1, lease_expires_at=later(minutes=1))
    due = job()
    before = list(Job.objects.order_by("pk").values())
    for pk, action in ((running.pk, "run_now"), (running.pk, "cancel"), (due.pk, "retry_now")):
        response = admin_client.post(job_act(pk, action), {"confirmed": "yes"})
        assert response.status_code == 302
        assert "is not possible" in messages_of(response)[0]
    assert list(Job.objects.order_by("pk").values()) == before
    assert admin_client.post(job_act(due.pk, "explode")).status_code == 404


def test_requeue_dead_letters_bulk_reports_and_keeps_history(admin_client):
    dead = [dead_letter(args=[i], queue="emails") for i in range(3)]
    response = bulk(admin_client, DEAD, "requeue", [d.pk for d in dead])
    assert messages_of(response) == ["Requeued 3 jobs."]
    assert not DeadLetter.objects.exists()
    jobs = list(Job.objects.order_by("args"))
    assert [j.args for j in jobs] == [[0], [1], [2]]
    assert all(j.view == "due" and j.attempts == 0 and len(j.errors) == 3 for j in jobs)
    assert all(j.queue == "emails" for j in jobs)


def test_requeue_single_opens_the_new_job(admin_client):
    dead = dead_letter(args=["again"])
    response = admin_client.post(dead_act(dead.pk, "requeue"))
    new = Job.objects.get()
    assert response["Location"] == reverse("admin:django_pgjobs_job_change", args=[new.pk])
    assert messages_of(response) == ["Requeued 1 job."]
    again = admin_client.post(dead_act(dead.pk, "requeue"))
    assert "was left alone" in messages_of(again)[-1]
    assert Job.objects.count() == 1


def test_requeue_leaves_a_dead_letter_whose_unique_key_is_taken(admin_client):
    job(unique_key="invoice:1", args=["waiting"])
    blocked = dead_letter(unique_key="invoice:1")
    free = dead_letter(unique_key="invoice:2")
    response = bulk(admin_client, DEAD, "requeue", [blocked.pk, free.pk])
    assert messages_of(response)[0].startswith("Requeued 1 job. 1 selected dead letter was left")
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [blocked.pk]


def test_requeue_of_dead_letters_sharing_a_unique_key_makes_one_job(admin_client):
    # The statement's own check cannot see the jobs it inserts: without one dead letter per key
    # the second insert broke the unique index and the page answered 500.
    older = dead_letter(unique_key="invoice:3", args=["older"], failed_at=later(hours=-2))
    newer = dead_letter(unique_key="invoice:3", args=["newer"], failed_at=later(hours=-1))
    free = dead_letter(args=["no key"])
    response = bulk(admin_client, DEAD, "requeue", [older.pk, newer.pk, free.pk])
    assert response.status_code == 302
    assert messages_of(response) == [
        "Requeued 2 jobs. 1 selected dead letter was left alone (already requeued or deleted by "
        "someone else, or their unique key is held by a ready or running job, or by a newer "
        "selected dead letter requeued instead)."
    ]
    assert sorted(args for (args,) in Job.objects.values_list("args", flat=True)) == [
        "newer",
        "no key",
    ]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [older.pk]


@pytest.mark.listen_notify
def test_run_now_and_requeue_wake_the_workers_of_their_queues(admin_client, other_connection):
    scheduled = [
        job(queue=queue, run_after=later(hours=1)) for queue in ("emails", "emails", "sms")
    ]
    dead = dead_letter(queue="reports")
    other_connection.execute("LISTEN pgjobs")
    bulk(admin_client, JOBS + "?view=scheduled", "run_now", [j.pk for j in scheduled])
    admin_client.post(dead_act(dead.pk, "requeue"))
    payloads = [n.payload for n in other_connection.notifies(timeout=0.5)]
    assert sorted(payloads) == ["emails", "reports", "sms"]  # one per queue and statement


def test_delete_dead_letters(admin_client):
    dead = [dead_letter(args=[i]) for i in range(3)]
    response = bulk(admin_client, DEAD, "delete", [d.pk for d in dead[:2]])
    assert messages_of(response) == ["Deleted 2 dead letters."]
    response = admin_client.post(dead_act(dead[2].pk, "delete"), {"confirmed": "yes"})
    assert messages_of(response)[-1] == "Deleted 1 dead letter."
    assert not DeadLetter.objects.exists() and not Job.objects.exists()


def test_pause_and_resume_a_queue_from_the_dashboard(admin_client):
    job(queue="emails", name="testproject.demo.jobs.noop")
    dashboard = reverse("admin:django_pgjobs_job_dashboard")
    response = admin_client.post(reverse("admin:django_pgjobs_queuestate_pause", args=["emails"]))
    assert response["Location"] == dashboard
    assert messages_of(response) == ["Paused queue emails."]
    assert QueueState.objects.get(name="emails").paused
    assert "pgjobs-paused" in admin_client.get(dashboard).content.decode()
    run_worker()  # workers skip the paused queue
    assert Job.objects.filter(queue="emails").exists()
    admin_client.post(reverse("admin:django_pgjobs_queuestate_resume", args=["emails"]))
    assert not QueueState.objects.get(name="emails").paused
    run_worker()
    assert not Job.objects.filter(queue="emails").exists()


def test_pause_rejects_a_bad_queue_name_and_foreign_redirects(admin_client):
    assert (
        admin_client.post(
            reverse("admin:django_pgjobs_queuestate_pause", args=["bad name!"])
        ).status_code
        == 404
    )
    response = admin_client.post(
        reverse("admin:django_pgjobs_queuestate_pause", args=["q1"]),
        {"next": "https://evil.example/"},
    )
    assert response["Location"] == reverse("admin:django_pgjobs_job_dashboard")


def test_bulk_pause_and_resume_queues(admin_client):
    for name in ("a", "b"):
        operations.set_queue_paused(operations.db.jobs_connection(), name, False)
    response = bulk(admin_client, QUEUES, "pause", ["a", "b"])
    assert messages_of(response) == ["Paused 2 queues."]
    assert QueueState.objects.filter(paused=True).count() == 2
    bulk(admin_client, QUEUES, "resume", ["a"])
    assert list(QueueState.objects.filter(paused=True).values_list("name", flat=True)) == ["b"]


def test_mutations_need_the_csrf_token(superuser):
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    dead = dead_letter()
    scheduled = job(run_after=later(hours=1))
    assert client.post(dead_act(dead.pk, "requeue")).status_code == 403
    assert client.post(job_act(scheduled.pk, "cancel")).status_code == 403
    assert bulk(client, DEAD, "delete", [dead.pk]).status_code == 403
    assert (
        client.post(reverse("admin:django_pgjobs_queuestate_pause", args=["x"])).status_code == 403
    )
    assert DeadLetter.objects.filter(pk=dead.pk).exists()
    assert Job.objects.get(pk=scheduled.pk).view == "scheduled"
    assert not QueueState.objects.exists()


def test_a_queue_with_only_running_jobs_is_listed_and_filtered(admin_client):
    """Running rows are not in pgjobs_job_queue_idx: the queue names and the admin's list of one
    queue find them through the lease index."""
    running = job(queue="busy", status="running", attempts=1, lease_expires_at=later(minutes=1))
    job(queue="idle", run_after=later(hours=1))
    assert operations.queue_names(connection) == ["busy", "idle"]
    response = admin_client.get(JOBS + "?queue=busy")
    assert list(response.context["cl"].result_list) == [running]
    assert response.context["cl"].result_count == 1
