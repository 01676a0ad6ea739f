"""Resuming a workflow (requeueing its dead letter, docs/howto/workflows.md, "When a step
fails") puts its steps back as they were enqueued: each step keeps its own due time (one due
later stays due later, one whose time has passed is due now), its queue, priority and
attempts; and a step is written as enqueue() writes a job, its payload's version included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_pgjobs import chain, group, operations
from django_pgjobs.models import DeadLetter, Job, Workflow
from django_pgjobs.testing import run_jobs
from django_pgjobs.workflows import abort_workflow
from testproject.demo.models import Counter, Execution
from testproject.handlers import workflows as wf
from testproject.handlers.versions import award_points

pytestmark = pytest.mark.django_db(transaction=True)

#: What a resume must leave as each step was enqueued with (``run_after`` apart: see the test).
KEPT = ("queue", "priority", "max_attempts", "timeout", "keep_result", "unique_key", "flow_key")


def steps_of(workflow) -> dict[int, dict]:
    """The workflow's jobs by the order given to ``charge``/``ship``/``email`` (their args)."""
    rows = Job.objects.filter(workflow_id=workflow.pk).values("args", "status", "run_after", *KEPT)
    return {row["args"][0]: row for row in rows}


def test_a_resumed_workflow_keeps_each_steps_own_due_time_and_options():
    tomorrow = timezone.now() + timedelta(days=1)
    in_an_hour = timezone.now() + timedelta(hours=1)
    members = [
        wf.ship.using(priority=7, max_attempts=1).s(1),  # fails: no stock
        wf.charge.using(run_after=in_an_hour, queue="second", priority=3, max_attempts=4).s(2),
        wf.charge.using(queue="third", priority=2, max_attempts=6).s(3),
    ]
    callback = wf.email.using(run_after=tomorrow, priority=9, max_attempts=2, timeout=5).s(9)
    workflow = chain(group(members), callback).enqueue()
    # ship 1 is dead-lettered (the workflow fails, email is cancelled); charge 3 is left waiting
    # in a queue not run here; charge 2 waits for its hour
    assert run_jobs(queues=["workflows"]).dead_lettered == 1
    enqueued = steps_of(workflow)
    # the operator aborts it: the waiting members are cancelled (charge 2 with its hour)
    assert abort_workflow(workflow.pk, requested_by="a test")["cancelled"] == 2
    assert {key: row["status"] for key, row in steps_of(workflow).items()} == {
        2: "cancelled", 3: "cancelled", 9: "cancelled"
    }  # fmt: skip
    # ... and resumes it by requeueing ship's dead letter, now that there is stock
    Counter.objects.create(name="stock", value=1)
    letter = DeadLetter.objects.get(workflow_id=workflow.pk)
    before = timezone.now()
    assert len(operations.requeue_dead_letters(connection, [letter.pk])) == 1
    assert Workflow.objects.get(pk=workflow.pk).state == "running"

    resumed = steps_of(workflow)
    for key in (2, 3, 9):
        assert {f: resumed[key][f] for f in KEPT} == {f: enqueued[key][f] for f in KEPT}, key
    assert {f: resumed[1][f] for f in KEPT} == {
        "queue": "workflows", "priority": 7, "max_attempts": 1, "timeout": None,
        "keep_result": False, "unique_key": None, "flow_key": None,
    }  # fmt: skip
    # due later stays due later; the members due before are due now (not before: in line from
    # the resume on)
    assert resumed[2]["run_after"] == in_an_hour and resumed[2]["status"] == "ready"
    assert resumed[9]["run_after"] == tomorrow and resumed[9]["status"] == "blocked"
    assert resumed[3]["run_after"] >= before and resumed[3]["status"] == "ready"
    assert resumed[1]["run_after"] >= before

    assert run_jobs(queues=["workflows", "second", "third"]).succeeded == 2  # ship 1, charge 3
    assert Job.objects.get(pk=workflow.job_ids[1]).status == "ready"  # charge 2: its hour
    # charge 2's hour comes: the group is done, and the callback waits for tomorrow
    Job.objects.filter(pk=workflow.job_ids[1]).update(run_after=timezone.now())
    assert run_jobs(queues=["workflows", "second"]).succeeded == 1
    callback_job = Job.objects.get(pk=workflow.job_ids[3])
    assert (callback_job.status, callback_job.run_after) == ("ready", tomorrow)
    assert not Execution.objects.filter(label="email-9").exists()


def test_a_step_of_a_versioned_job_is_written_with_its_version_and_run_as_it_was_given():
    """A step was written with the column's default, version 1: the worker "upgraded" the
    arguments of a @job(version=2) from version 1, and the step was dead-lettered (or, with an
    upgrade that accepts them, called with arguments the caller never gave)."""
    Counter.objects.create(name="score")
    workflow = chain(award_points.s("score", amount=2), wf.email.s(1)).enqueue()
    assert Job.objects.get(pk=workflow.job_ids[0]).version == 2
    assert run_jobs(queues=["handlers"]).succeeded == 1
    assert Counter.objects.get(name="score").value == 2
    assert Workflow.objects.get(pk=workflow.pk).step == 1
