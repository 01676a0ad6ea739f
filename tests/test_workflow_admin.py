"""The admin's workflow page: its steps, their states and timings, reachable from any of its
jobs and dead letters; "Abort workflow" needs POST and the change permission; and the abort
itself (``abort_workflow``): running steps asked to stop, the rest cancelled."""

from __future__ import annotations

import pytest
from admin_data import make_user
from django.test import Client
from django.urls import reverse

from django_pgjobs import abort, chain, group
from django_pgjobs.admin import workflows as workflow_admin
from django_pgjobs.models import Job, Workflow
from django_pgjobs.workflows import abort_workflow
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def login(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def workflow():
    saved = chain(wf.charge.s(1), group(wf.resize.s(i) for i in range(3)), wf.email.s(1)).enqueue()
    first = saved.job_ids[0]
    Job.objects.filter(pk=first).update(status="running")  # as a worker's claim leaves it
    return saved


OPERATOR = ("view_workflow", "change_workflow", "change_job", "delete_job")


def test_the_page_shows_every_step_and_is_linked_from_each_job(workflow):
    client = login(make_user("viewer", perms=("view_job", "view_workflow")))
    page = reverse("admin:django_pgjobs_workflow_change", args=[workflow.pk])
    for job_id in workflow.job_ids:
        detail = client.get(reverse("admin:django_pgjobs_job_change", args=[job_id]))
        assert page in detail.content.decode()
    body = client.get(page).content.decode()
    assert "Step 1" in body and "Step 2 (group of 3)" in body and "Step 3" in body
    assert body.count(">blocked<") == 4 and ">running<" in body
    assert ">Abort workflow<" not in body  # view permission only
    listing = client.get(reverse("admin:django_pgjobs_workflow_changelist")).content.decode()
    assert "1 of 3 (0/1 done)" in listing


def test_abort_needs_post_and_the_change_permission(workflow, client):
    url = reverse("admin:django_pgjobs_workflow_abort", args=[workflow.pk])
    assert "/admin/login/" in client.post(url)["Location"]
    assert login(make_user("staff")).post(url).status_code == 403
    assert login(make_user("viewer", perms=("view_workflow",))).post(url).status_code == 403
    # what aborting does to jobs needs the jobs' own permissions too (their Cancel and Abort)
    workflows_only = login(make_user("half", perms=("view_workflow", "change_workflow")))
    assert workflows_only.post(url).status_code == 403
    operator = login(make_user("operator", perms=OPERATOR))
    assert operator.get(url).status_code == 405
    assert Workflow.objects.get().state == "running"
    assert (
        ">Abort workflow<"
        in operator.get(
            reverse("admin:django_pgjobs_workflow_change", args=[workflow.pk])
        ).content.decode()
    )
    assert operator.post(url).status_code == 302
    stored = Workflow.objects.get()
    assert stored.state == "aborted" and "admin user operator" in stored.reason


def test_aborting_a_workflow_asks_its_running_steps_to_stop_and_cancels_the_rest(workflow):
    done = abort_workflow(workflow.pk, requested_by="a test")
    assert done == {"aborted": True, "cancelled": 4, "requested": [workflow.job_ids[0]]}
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses[workflow.job_ids[0]] == "running"
    assert Job.objects.get(pk=workflow.job_ids[0]).abort_requested_by == "a test"
    assert sorted(statuses.values()) == ["cancelled"] * 4 + ["running"]
    assert abort_workflow(workflow.pk)["aborted"] is False  # once


def test_a_workflow_ended_by_a_cancelled_member_can_still_be_aborted_whole():
    saved = chain(group(wf.charge.s(i) for i in range(3)), wf.email.s(1)).enqueue()
    abort(saved.job_ids[0], requested_by="a test")  # the others run on
    client = login(make_user("operator", perms=OPERATOR))
    page = reverse("admin:django_pgjobs_workflow_change", args=[saved.pk])
    assert ">Abort workflow<" in client.get(page).content.decode()
    client.post(reverse("admin:django_pgjobs_workflow_abort", args=[saved.pk]))
    assert sorted(Job.objects.values_list("status", flat=True)) == ["cancelled"] * 4
    assert ">Abort workflow<" not in client.get(page).content.decode()  # nothing left to stop


def test_abort_selected_workflows_aborts_a_bounded_number_per_request(monkeypatch):
    """Each abort is a transaction of its own: "select all" over thousands ran them all in one
    request. The first ABORT_LIMIT go, and the message says to run it again."""
    monkeypatch.setattr(workflow_admin, "ABORT_LIMIT", 2)
    saved = [chain(wf.charge.s(i), wf.email.s(i)).enqueue() for i in range(3)]
    client = login(make_user("operator", perms=OPERATOR))
    response = client.post(
        reverse("admin:django_pgjobs_workflow_changelist"),
        {"action": "abort_selected", "_selected_action": [w.pk for w in saved]},
        follow=True,
    )
    states = dict(Workflow.objects.values_list("id", "state"))
    assert [states[w.pk] for w in saved] == ["aborted", "aborted", "running"]
    shown = [str(m) for m in response.context["messages"]]
    assert shown == [
        "Aborted 2 workflows.",
        "Only the first 2 selected workflows were aborted; run the action again for the rest.",
    ]
