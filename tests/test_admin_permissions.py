"""Who may do what: anonymous -> login, staff without permissions -> 403, view-only -> look but
never change, superuser -> everything; partial permissions map to the actions they name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from admin_data import dead_letter, job, make_user
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgjobs.models import DeadLetter, Job, QueueState, Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    now = timezone.now()
    return {
        "scheduled": job(args=["s"], run_after=now + timedelta(hours=1)),
        "retrying": job(args=["r"], attempts=1, run_after=now + timedelta(hours=1)),
        "due": job(args=["d"]),
        "dead": dead_letter(args=["x"]),
        "dead2": dead_letter(args=["y"]),
    }


def pages(w) -> list[str]:
    return [
        reverse("admin:django_pgjobs_job_dashboard"),
        reverse("admin:django_pgjobs_job_changelist"),
        reverse("admin:django_pgjobs_job_changelist") + "?view=retrying",
        reverse("admin:django_pgjobs_job_change", args=[w["retrying"].pk]),
        reverse("admin:django_pgjobs_deadletter_changelist"),
        reverse("admin:django_pgjobs_deadletter_change", args=[w["dead"].pk]),
        reverse("admin:django_pgjobs_deadletter_summary"),
        reverse("admin:django_pgjobs_worker_changelist"),
        reverse("admin:django_pgjobs_queuestate_changelist"),
    ]


#: The answer of the confirmation page (single rows) or of the list's (bulk) of the actions that
#: ask first; sent with every change, so a refusal is the permission's, not the question's.
CONFIRMED = {"confirmed": "yes", "post": "yes"}


def single_mutations(w) -> list[str]:
    return [
        reverse("admin:django_pgjobs_job_act", args=[w["scheduled"].pk, "run_now"]),
        reverse("admin:django_pgjobs_job_act", args=[w["retrying"].pk, "retry_now"]),
        reverse("admin:django_pgjobs_job_act", args=[w["due"].pk, "cancel"]),
        reverse("admin:django_pgjobs_deadletter_act", args=[w["dead"].pk, "requeue"]),
        reverse("admin:django_pgjobs_deadletter_act", args=[w["dead2"].pk, "delete"]),
        reverse("admin:django_pgjobs_queuestate_pause", args=["default"]),
    ]


def bulk_mutations(w) -> list[tuple[str, dict]]:
    jobs = reverse("admin:django_pgjobs_job_changelist")
    dead = reverse("admin:django_pgjobs_deadletter_changelist")
    ids = [str(w[k].pk) for k in ("scheduled", "retrying", "due")]
    dead_ids = [str(w["dead"].pk), str(w["dead2"].pk)]
    return [
        (jobs, {"action": "run_now", "_selected_action": ids, **CONFIRMED}),
        (jobs, {"action": "retry_now", "_selected_action": ids, **CONFIRMED}),
        (jobs, {"action": "cancel", "_selected_action": ids, **CONFIRMED}),
        (dead, {"action": "requeue", "_selected_action": dead_ids, **CONFIRMED}),
        (dead, {"action": "delete", "_selected_action": dead_ids, **CONFIRMED}),
        (
            dead,
            {"action": "delete_selected", "_selected_action": dead_ids, **CONFIRMED},
        ),  # Django's own
    ]


def state():
    return (
        sorted(Job.objects.values_list("id", "status", "run_after", "attempts")),
        sorted(DeadLetter.objects.values_list("id", flat=True)),
        sorted(QueueState.objects.values_list("name", "paused")),
    )


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_anonymous_is_sent_to_login_and_changes_nothing(world):
    client = client_for(None)
    before = state()
    for url in pages(world):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    for url in single_mutations(world):
        response = client.post(url, CONFIRMED)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    for url, data in bulk_mutations(world):
        assert "/admin/login/" in client.post(url, data)["Location"]
    assert state() == before


def test_staff_without_permissions_gets_403_and_changes_nothing(world, staff_no_perms):
    client = client_for(staff_no_perms)
    before = state()
    for url in pages(world):
        assert client.get(url).status_code == 403, url
    for url in single_mutations(world):
        assert client.post(url, CONFIRMED).status_code == 403, url
    for url, data in bulk_mutations(world):
        assert client.post(url, data).status_code == 403, url
    assert state() == before


def test_view_only_user_can_look_but_every_change_is_refused(world, viewer):
    client = client_for(viewer)
    before = state()
    for url in pages(world):
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        for button in (
            ">Run now<",
            ">Retry now<",
            ">Cancel job<",
            ">Requeue<",
            ">Delete for good<",
            ">Pause<",
        ):
            assert button not in page, (url, button)
        assert response.context.get("action_form") is None, url
    for url in single_mutations(world):
        assert client.post(url, CONFIRMED).status_code == 403, url
    for url, data in bulk_mutations(world):
        assert client.post(url, data).status_code in (200, 302), url  # "no action selected"
    assert state() == before


def test_superuser_may_do_everything(world, superuser):
    client = client_for(superuser)
    for url in pages(world):
        assert client.get(url).status_code == 200, url
    for url in single_mutations(world):
        assert client.post(url, CONFIRMED).status_code == 302, url
    assert Job.objects.get(pk=world["scheduled"].pk).view == "due"
    assert Job.objects.get(pk=world["retrying"].pk).run_after <= timezone.now()
    assert not Job.objects.filter(pk=world["due"].pk).exists()
    assert not DeadLetter.objects.exists()
    assert Job.objects.filter(args=["x"]).exists()  # requeued
    assert QueueState.objects.get(name="default").paused


def test_change_without_delete_allows_run_and_requeue_but_not_cancel_or_delete(world):
    operator = make_user(
        "operator",
        perms=("view_job", "change_job", "view_deadletter", "change_deadletter"),
    )
    client = client_for(operator)
    detail = client.get(reverse("admin:django_pgjobs_job_change", args=[world["scheduled"].pk]))
    assert ">Run now<" in detail.content.decode() and ">Cancel job<" not in detail.content.decode()
    assert client.post(single_mutations(world)[2], CONFIRMED).status_code == 403  # cancel
    assert (
        client.post(single_mutations(world)[4], CONFIRMED).status_code == 403
    )  # delete dead letter
    assert (
        client.post(single_mutations(world)[5], CONFIRMED).status_code == 403
    )  # pause: change_queuestate
    assert Job.objects.filter(pk=world["due"].pk).exists()
    assert DeadLetter.objects.filter(pk=world["dead2"].pk).exists()
    assert client.post(single_mutations(world)[0], CONFIRMED).status_code == 302  # run now
    assert client.post(single_mutations(world)[3], CONFIRMED).status_code == 302  # requeue
    assert Job.objects.get(pk=world["scheduled"].pk).view == "due"
    assert not DeadLetter.objects.filter(pk=world["dead"].pk).exists()


def test_delete_without_change_allows_cancel_only():
    operator = make_user("janitor", perms=("view_job", "delete_job"))
    client = client_for(operator)
    waiting = job(run_after=timezone.now() + timedelta(hours=1))
    assert (
        client.post(
            reverse("admin:django_pgjobs_job_act", args=[waiting.pk, "run_now"])
        ).status_code
        == 403
    )
    assert Job.objects.get(pk=waiting.pk).view == "scheduled"
    assert (
        client.post(
            reverse("admin:django_pgjobs_job_act", args=[waiting.pk, "cancel"]), CONFIRMED
        ).status_code
        == 302
    )
    assert not Job.objects.exists()


def test_pause_needs_change_queuestate():
    operator = make_user("pauser", perms=("view_job", "change_queuestate"))
    client = client_for(operator)
    page = client.get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    job(queue="emails")
    page = client.get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    assert ">Pause<" in page
    assert (
        client.post(reverse("admin:django_pgjobs_queuestate_pause", args=["emails"])).status_code
        == 302
    )
    assert QueueState.objects.get(name="emails").paused


def test_dashboard_shows_dead_letters_and_workers_only_to_who_may_see_them(world, viewer):
    Worker.objects.create(id="web-9:31:x", hostname="web-9", pid=31, queues=[], concurrency=1)
    dead_list = reverse("admin:django_pgjobs_deadletter_changelist")
    hidden = (
        dead_list,
        reverse("admin:django_pgjobs_deadletter_summary"),
        reverse("admin:django_pgjobs_worker_changelist"),
        'id="pgjobs-workers"',
        "web-9",
        ">dead<",
        "dead letters</span>",
    )
    jobs_only = client_for(make_user("jobs-only", perms=("view_job",)))
    page = jobs_only.get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    assert 'id="queue-default"' in page
    assert [text for text in hidden if text in page] == []
    page = client_for(viewer).get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    assert [text for text in hidden if text not in page] == []
