"""Every way an operator stops a job ends a workflow it is a step of (docs/howto/workflows.md,
"Stopping a workflow"): the admin's *Cancel job*, ``django_pgjobs.abort()``, ``manage.py pgjobs
purge`` on a waiting step, and ``abort_workflow()`` on a step claimed at that very moment."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.urls import reverse
from django.utils import timezone
from helpers import database_url_for_tests, wait_until, wait_until_listening, waiting_on_a_lock

from django_pgjobs import abort, chain, group, operations
from django_pgjobs.models import DeadLetter, Job, Workflow
from django_pgjobs.workflows import abort_workflow
from testproject.demo.models import Execution
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def claim_all() -> list[operations.ClaimedJob]:
    builder = operations.ClaimBuilder(worker="t", queues=["workflows"], lease_seconds=30)
    return operations.complete(connection, claim=builder.take(100)).claimed


def statuses(workflow) -> list[tuple[int, str]]:
    rows = Job.objects.filter(workflow_id=workflow.pk).order_by("workflow_step", "workflow_member")
    return list(rows.values_list("workflow_step", "status"))


def test_cancelling_a_waiting_step_in_the_admin_ends_its_workflow(admin_client):
    workflow = chain(wf.charge.s(1), wf.ship.s(1), wf.email.s(1)).enqueue()
    (charged,) = claim_all()
    operations.complete(connection, [charged])
    shipping = workflow.job_ids[1]
    page = reverse("admin:django_pgjobs_job_act", args=[shipping, "cancel"])
    assert admin_client.post(page, {"confirmed": "yes"}).status_code == 302
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "aborted" and stored.finished_at is not None
    assert stored.reason == (
        f"step 1 ({wf.ship.name} #{shipping}) was cancelled by admin user 'root'"
    )
    assert statuses(workflow) == [(1, "cancelled"), (2, "cancelled")]  # kept, never to run
    assert claim_all() == []


def test_aborting_a_waiting_group_member_cancels_the_callback_and_the_others_run_on():
    workflow = chain(group(wf.charge.s(i) for i in range(3)), wf.email.s(1)).enqueue()
    first = workflow.job_ids[0]
    done = abort(first, requested_by="a test")
    assert (done.cancelled, done.not_found) == ([first], [])
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "aborted"
    assert stored.reason.endswith(f"#{first}) was aborted at the request of a test")
    assert statuses(workflow) == [(0, "cancelled"), (0, "ready"), (0, "ready"), (1, "cancelled")]
    others = claim_all()
    assert len(others) == 2
    operations.complete(connection, others)  # counted, releasing nothing
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.state, stored.remaining) == ("aborted", 1)
    assert statuses(workflow) == [(0, "cancelled"), (1, "cancelled")]


def test_aborting_a_blocked_step_ends_its_workflow():
    workflow = chain(wf.charge.s(1), wf.ship.s(1), wf.email.s(1)).enqueue()
    done = abort(workflow.job_ids[2])
    assert done.cancelled == [workflow.job_ids[2]]
    assert Workflow.objects.get(pk=workflow.pk).state == "aborted"
    assert statuses(workflow) == [(0, "ready"), (1, "cancelled"), (2, "cancelled")]


def test_purging_a_waiting_step_ends_its_workflow(capsys):
    workflow = chain(wf.charge.s(1), wf.email.s(1)).enqueue()
    lone = wf.charge.enqueue(2)  # a job outside a workflow: deleted, as before
    call_command("pgjobs", "purge", "--queue", "workflows")
    assert "Cancelled 2 jobs." in capsys.readouterr().out
    assert not Job.objects.filter(pk=lone.pk).exists()
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "aborted" and "cancelled by manage.py pgjobs purge" in stored.reason
    assert statuses(workflow) == [(0, "cancelled"), (1, "cancelled")]


def aborting_in_a_thread(workflow, outcome: dict) -> threading.Thread:
    """``abort_workflow()`` on a connection of its own (the thread's), closed when it is done."""

    def run() -> None:
        try:
            outcome.update(abort_workflow(workflow.pk, requested_by="a test"))
        finally:
            connections.close_all()

    return threading.Thread(target=run)


def test_a_step_claimed_while_the_workflow_is_aborted_is_asked_to_stop():
    workflow = chain(wf.charge.s(1), wf.email.s(1)).enqueue()
    first = workflow.job_ids[0]
    url = database_url_for_tests()
    outcome: dict = {}
    with psycopg.connect(url) as claimer:
        # a worker's claim, not committed yet: the abort waits for the row, then sees it running
        claimer.execute(
            "UPDATE pgjobs_job SET status = 'running', attempts = 1, claim_token = "
            "gen_random_uuid(), lease_expires_at = now() + interval '30 seconds' WHERE id = %s",
            [first],
        )
        aborting = aborting_in_a_thread(workflow, outcome)
        aborting.start()
        wait_until(waiting_on_a_lock, timeout=30)
        claimer.commit()
        aborting.join(timeout=30)
    assert outcome == {"aborted": True, "cancelled": 1, "requested": [first]}
    claimed = Job.objects.get(pk=first)
    assert claimed.status == "running" and claimed.abort_requested_by == "a test"
    assert statuses(workflow) == [(0, "running"), (1, "cancelled")]


# -- with real runjobs processes ------------------------------------------------------------------

WORKER = ("--queue", "workflows", "--concurrency", "1", "--prefetch", "4")


def test_aborting_a_workflow_stops_its_running_step_and_its_held_steps_never_start(
    start_worker,
):
    workflow = chain(group(wf.crunch.s(i) for i in range(3)), wf.email.s(0)).enqueue()
    outcome: dict = {}
    aborting = aborting_in_a_thread(workflow, outcome)
    with psycopg.connect(database_url_for_tests()) as member:
        # a member's acknowledgement in flight holds the workflow's row: the abort waits for it
        member.execute("SELECT 1 FROM pgjobs_workflow WHERE id = %s FOR UPDATE", [workflow.pk])
        aborting.start()
        wait_until(waiting_on_a_lock, timeout=30)
        worker = start_worker(*WORKER)
        wait_until_listening()
        # meanwhile one step starts (one executor) and the two others are held, claimed unstarted
        wait_until(lambda: Execution.objects.count() == 1, timeout=30)
        wait_until(lambda: Job.objects.filter(status="running").count() == 3, timeout=30)
        member.commit()
        aborting.join(timeout=30)
    assert outcome == {"aborted": True, "cancelled": 1, "requested": workflow.job_ids[:3]}
    wait_until(lambda: DeadLetter.objects.count() == 3, timeout=30, interval=0.05)
    assert list(Execution.objects.values_list("label", flat=True)) == ["crunch-0"]
    error_types = set(DeadLetter.objects.values_list("error_type", flat=True))
    assert error_types == {"Aborted"}, worker.output()[-3000:]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "aborted" and stored.reason == "aborted at the request of a test"
    assert statuses(workflow) == [(1, "cancelled")]


def test_a_chord_member_cancelled_in_the_admin_cancels_its_callback(start_worker, admin_client):
    later = timezone.now() + timedelta(hours=1)
    members = [wf.charge.s(1), wf.charge.s(2), wf.charge.using(run_after=later).s(3)]
    workflow = chain(group(members), wf.email.s(0)).enqueue()
    start_worker("--queue", "workflows")
    wait_until(lambda: Execution.objects.count() == 2, timeout=30)
    scheduled = workflow.job_ids[2]
    jobs = reverse("admin:django_pgjobs_job_changelist")
    form = {"action": "cancel", "_selected_action": [str(scheduled)], "index": 0, "post": "yes"}
    admin_client.post(jobs, form)
    # the workflow ends at once; the callback never runs
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "aborted" and "cancelled by admin user" in stored.reason
    assert statuses(workflow) == [(0, "cancelled"), (1, "cancelled")]
    wf.email.enqueue(99)  # a job after it: once it ran, the worker would have run the callback
    wait_until(lambda: Execution.objects.filter(label="email-99").exists(), timeout=30)
    assert sorted(Execution.objects.values_list("label", flat=True)) == [
        "charge-1", "charge-2", "email-99"
    ]  # fmt: skip
