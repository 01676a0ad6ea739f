"""``manage.py pgjobs prune --dry-run``: the counts the prune would delete, nothing deleted, and
the same numbers as the prune that follows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from admin_data import job
from django.utils import timezone
from test_pgjobs_command import earlier, pgjobs
from test_repair_command import DAY, dead_letters

from django_pgjobs import chain
from django_pgjobs.models import DeadLetter, Job, Repair, Workflow
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db


def old_finished_workflow() -> Workflow:
    workflow = chain(wf.charge.s(1), wf.email.s(1)).enqueue()
    Job.objects.filter(workflow_id=workflow.pk).update(status="cancelled")
    at = timezone.now() - timedelta(days=8)
    Workflow.objects.filter(pk=workflow.pk).update(state="aborted", finished_at=at)
    return workflow


def repair(days_ago: float) -> Repair:
    return Repair.objects.create(
        repaired_at=timezone.now() - timedelta(days=days_ago),
        repaired_by="admin user 'root'",
        name="shop.charge",
        queue="default",
        dead_letter_id=1,
        job_id=2,
        requeued_as=3,
        reason="attempts exhausted",
    )


def test_a_dry_run_counts_what_the_prune_then_deletes_and_deletes_nothing(settings):
    settings.PGJOBS = {**settings.PGJOBS, "DEAD_LETTER_MAX_AGE_SECONDS": 7 * DAY}
    for _ in range(3):
        job(status="successful", attempts=1, finished_at=earlier(days=8))
    job(status="successful", attempts=1, keep_result=True, finished_at=earlier(days=3))  # kept
    job()  # waiting
    old_finished_workflow()
    chain(wf.charge.s(2)).enqueue()  # running: kept
    dead_letters(4, name="shop.charge", hours_ago=240)  # too old
    dead_letters(5, name="shop.charge", hours_ago=1)  # two of them beyond the newest 3
    dead_letters(2, name="shop.refund", hours_ago=1)
    repair(days_ago=8)  # past the dead letters' age
    kept = repair(days_ago=1)
    before = (Job.objects.count(), Workflow.objects.count(), DeadLetter.objects.count())

    dry = pgjobs("prune", "--dry-run", "--keep-per-name", "3").splitlines()
    assert dry == [
        "Would prune 3 successful jobs past their retention, and 1 finished workflow.",
        "Would prune 6 dead letters past their retention (failed over 7 d ago; beyond the "
        "newest 3 per job name).",
        "Would prune 1 repair record made over 7 d ago.",
    ]
    assert (Job.objects.count(), Workflow.objects.count(), DeadLetter.objects.count()) == before
    assert Repair.objects.count() == 2

    done = pgjobs("prune", "--keep-per-name", "3").splitlines()
    assert done == [line.replace("Would prune", "Pruned") for line in dry]
    assert DeadLetter.objects.filter(name="shop.charge").count() == 3
    assert list(Repair.objects.all()) == [kept]
    assert pgjobs("prune", "--dry-run", "--keep-per-name", "3").splitlines() == [
        "Would prune 0 successful jobs past their retention.",
        "Would prune 0 dead letters past their retention (failed over 7 d ago; beyond the "
        "newest 3 per job name).",
    ]


def test_a_dry_run_without_a_dead_letter_retention_says_nothing_of_dead_letters():
    dead_letters(3, hours_ago=1000)
    assert pgjobs("prune", "--dry-run") == "Would prune 0 successful jobs past their retention.\n"
    assert DeadLetter.objects.count() == 3
