"""Workflows after a failure: an edited dead letter requeued resumes its workflow; a group whose
members were all dead-lettered resumes with the requeue of its last one; finished workflows are
pruned with their cancelled steps (``KEEP_WORKFLOWS_SECONDS``), those with anything left kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from django_pgjobs import chain, group, operations, retention
from django_pgjobs.models import DeadLetter, Job, Workflow
from django_pgjobs.worker.maintenance import PruneConfig, Pruner
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

ERROR = {"type": "RuntimeError", "message": "out of stock"}


def claim_all() -> list[operations.ClaimedJob]:
    builder = operations.ClaimBuilder(worker="t", queues=["workflows"], lease_seconds=30)
    return operations.complete(connection, claim=builder.take(100)).claimed


def dead_letter(job: operations.ClaimedJob) -> int:
    return operations.dead_letter_job(connection, job, reason="no stock", error=ERROR)


def state_of(workflow) -> str:
    return Workflow.objects.get(pk=workflow.pk).state


def test_a_group_whose_members_were_all_dead_lettered_resumes_with_the_last_requeue():
    workflow = chain(group(wf.ship.s(i) for i in range(3)), wf.email.s(0)).enqueue()
    dead = [dead_letter(job) for job in sorted(claim_all(), key=lambda job: job.id)]
    assert state_of(workflow) == "failed"
    operations.requeue_dead_letters(connection, dead[:1])
    # two members still dead letters: the workflow stays failed, its callback cancelled
    assert state_of(workflow) == "failed"
    assert Job.objects.get(workflow_step=1).status == "cancelled"
    (again,) = claim_all()
    operations.complete(connection, [again])  # counted all the same
    assert Workflow.objects.get(pk=workflow.pk).remaining == 2
    operations.requeue_dead_letters(connection, dead[1:])
    assert state_of(workflow) == "running"
    assert Job.objects.get(workflow_step=1).status == "blocked"
    operations.complete(connection, claim_all())
    (callback,) = claim_all()
    assert callback.name == wf.email.name
    operations.complete(connection, [callback])
    assert state_of(workflow) == "succeeded"


def test_a_group_whose_deleted_dead_letter_can_never_finish_is_not_resumed():
    """One member's dead letter deleted for good, the other's requeued: the step can never
    count down to its callback. Resumed, the workflow waited as 'running' for ever; it stays
    failed, and the requeued member runs and is counted."""
    workflow = chain(group(wf.ship.s(i) for i in range(2)), wf.email.s(0)).enqueue()
    first, second = (dead_letter(job) for job in sorted(claim_all(), key=lambda job: job.id))
    operations.delete_dead_letters(connection, [first])
    operations.requeue_dead_letters(connection, [second])
    assert state_of(workflow) == "failed"
    assert Job.objects.get(workflow_step=1).status == "cancelled"  # the callback never runs
    operations.complete(connection, claim_all())
    assert Workflow.objects.get(pk=workflow.pk).remaining == 1  # the deleted member's


def finished(workflow, state: str, days: float) -> None:
    at = timezone.now() - timedelta(days=days)
    Workflow.objects.filter(pk=workflow.pk).update(state=state, finished_at=at)


def test_finished_workflows_are_pruned_with_their_cancelled_steps_in_bounded_batches(capsys):
    with_a_dead_letter = chain(wf.ship.s(12), wf.email.s(12)).enqueue()
    (shipping,) = claim_all()
    dead_letter(shipping)  # requeueing it would resume the workflow: kept while it is there
    finished(with_a_dead_letter, "failed", days=8)
    old = [chain(wf.charge.s(i), wf.email.s(i)).enqueue() for i in range(3)]
    for workflow in old:
        Job.objects.filter(workflow_id=workflow.pk).update(status="cancelled")
        finished(workflow, "aborted", days=8)
    recent = chain(wf.charge.s(9)).enqueue()
    Job.objects.filter(workflow_id=recent.pk).delete()  # succeeded, not kept
    finished(recent, "succeeded", days=1)
    running = chain(wf.charge.s(10), wf.email.s(10)).enqueue()
    with_a_job_left = chain(wf.charge.s(11)).enqueue()  # its step runs on after the abort
    finished(with_a_job_left, "aborted", days=8)
    week = 7 * 24 * 3600.0

    assert retention.prune_workflows(connection, week, limit=2) == (3, 6)  # two statements
    kept = set(Workflow.objects.values_list("pk", flat=True))
    assert kept == {with_a_dead_letter.pk, recent.pk, running.pk, with_a_job_left.pk}
    assert not Job.objects.filter(workflow_id__in=[w.pk for w in old]).exists()
    assert Job.objects.filter(workflow_id=with_a_dead_letter.pk, status="cancelled").exists()

    finished(recent, "succeeded", days=8)
    assert Pruner(_Db(), PruneConfig(keep_workflows_seconds=week)).run_once() == 1  # the worker's
    assert not Workflow.objects.filter(pk=recent.pk).exists()

    Job.objects.filter(workflow_id=with_a_job_left.pk).delete()  # its step ended
    call_command("pgjobs", "prune")  # KEEP_WORKFLOWS_SECONDS: a week by default
    assert "and 1 finished workflow." in capsys.readouterr().out
    kept = set(Workflow.objects.values_list("pk", flat=True))
    assert kept == {with_a_dead_letter.pk, running.pk}

    # the operator gives up on the failed step: its workflow, failed for good, goes next
    call_command("pgjobs", "delete", str(DeadLetter.objects.get().pk))
    call_command("pgjobs", "prune")
    assert set(Workflow.objects.values_list("pk", flat=True)) == {running.pk}
    assert not Job.objects.filter(workflow_id=with_a_dead_letter.pk).exists()


class _Db:
    """The maintenance unit's database: the test's connection."""

    def connection(self):
        return connection
