"""A workflow's requeue racing another requeue, an abort or a failure of the same workflow
(docs/howto/workflows.md): each decides on what the other committed, never on a snapshot taken
before it waited. One side holds its transaction open (as an admin request does under
``ATOMIC_REQUESTS``) while the other runs on a thread and connection of its own."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone
from helpers import wait_until, waiting_on_a_lock

from django_pgjobs import chain, db, group, operations
from django_pgjobs.models import DeadLetter, Job, Workflow
from django_pgjobs.testing import run_jobs
from django_pgjobs.workflows import abort_workflow
from testproject.demo.models import Counter, Execution
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


class HeldOpen:
    """``work()`` in a transaction on a thread of its own, left open until ``commit()``."""

    def __init__(self, work) -> None:
        self.done, self.go = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(work,))
        self.thread.start()
        assert self.done.wait(30), "the held transaction did not do its work"

    def _run(self, work) -> None:
        try:
            with transaction.atomic():
                work()
                self.done.set()
                self.go.wait(30)
        finally:
            connections.close_all()

    def commit(self) -> None:
        self.go.set()
        self.thread.join(30)


class Beside:
    """``work()`` on a thread and connection of its own, started at once; ``result()``."""

    def __init__(self, work) -> None:
        self.value, self.finished = None, threading.Event()
        self.thread = threading.Thread(target=self._run, args=(work,))
        self.thread.start()

    def _run(self, work) -> None:
        try:
            self.value = work()
        finally:
            self.finished.set()
            connections.close_all()

    def result(self):
        self.thread.join(30)
        assert self.finished.is_set()
        return self.value


def dead_letter_of(workflow, order_id: int) -> int:
    return DeadLetter.objects.get(workflow_id=workflow.pk, args=[order_id]).pk


def test_two_requeues_of_a_groups_last_dead_letters_at_once_resume_it_once():
    """Each requeue saw the other's dead letter in its own snapshot, and neither resumed the
    workflow: every member ran and succeeded, its callback stayed cancelled, for good."""
    workflow = chain(group(wf.ship.s(1), wf.ship.s(2), wf.charge.s(3)), wf.email.s(9)).enqueue()
    run_jobs()  # no stock: both ships are dead-lettered, the workflow fails
    assert Workflow.objects.get(pk=workflow.pk).state == "failed"
    Counter.objects.create(name="stock", value=1)
    first, second = dead_letter_of(workflow, 1), dead_letter_of(workflow, 2)

    held = HeldOpen(lambda: operations.requeue_dead_letters(connection, [first]))
    other = Beside(lambda: operations.requeue_dead_letters(connection, [second]))
    wait_until(lambda: other.finished.is_set() or waiting_on_a_lock(), timeout=10)
    held.commit()
    assert len(other.result()) == 1

    assert Workflow.objects.get(pk=workflow.pk).state == "running"
    assert run_jobs().succeeded == 3  # both ships, then the callback
    assert Workflow.objects.get(pk=workflow.pk).state == "succeeded"
    assert Execution.objects.filter(label="email-9").count() == 1


def test_an_abort_while_a_requeue_resumes_the_workflow_stops_what_the_resume_made_waiting():
    """The abort's statement ran on the snapshot taken before it waited for the workflow: the
    jobs the resume had made waiting again looked cancelled to it, and all of them ran."""
    workflow = chain(wf.charge.s(1), wf.ship.s(1), wf.email.s(1)).enqueue()
    run_jobs()  # charge runs, ship is dead-lettered, email is cancelled
    Counter.objects.create(name="stock", value=1)
    letter = dead_letter_of(workflow, 1)

    held = HeldOpen(lambda: operations.requeue_dead_letters(connection, [letter]))
    aborting = Beside(lambda: abort_workflow(workflow.pk, requested_by="test"))
    wait_until(lambda: aborting.finished.is_set() or waiting_on_a_lock(), timeout=10)
    held.commit()
    done = aborting.result()

    assert done["aborted"] and done["cancelled"] == 2  # ship (ready again) and email (blocked)
    assert run_jobs().succeeded == 0
    assert not Execution.objects.filter(label__in=["ship-1", "email-1"]).exists()
    assert Workflow.objects.get(pk=workflow.pk).state == "aborted"


def test_a_step_dead_lettered_while_a_resume_commits_fails_the_resumed_workflow():
    """The failure's statement filtered the workflow's state on its own snapshot (failed, the
    resume not yet committed) and left it alone: the workflow ran on, 'running', with a step
    in the dead letters."""
    later = timezone.now() + timedelta(hours=1)
    second = wf.ship.using(run_after=later, queue="second").s(2)
    workflow = chain(group(wf.ship.s(1), second), wf.email.s(9)).enqueue()
    run_jobs()  # ship 1 is dead-lettered (no stock); ship 2 waits for its time
    letter = dead_letter_of(workflow, 1)

    held = HeldOpen(lambda: operations.requeue_dead_letters(connection, [letter]))
    Job.objects.filter(workflow_id=workflow.pk, args=[2]).update(run_after=timezone.now())
    # ship 2 fails, the last of its attempts; ship 1, ready again once the resume commits, is
    # not run (another queue): its own failure would cancel the step after it anew
    failing = Beside(lambda: run_jobs(queues=["second"]))
    wait_until(lambda: failing.finished.is_set() or waiting_on_a_lock(), timeout=10)
    held.commit()
    failing.result()

    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "failed", stored.reason
    assert DeadLetter.objects.filter(workflow_id=workflow.pk, args=[2]).exists()
    # the step after the group, which the resume had made waiting again ('blocked') after the
    # failure's snapshot saw it cancelled, is cancelled with the workflow: left 'blocked', it
    # kept a failed workflow's page showing a waiting step, and the workflow from its pruning
    assert Job.objects.get(workflow_id=workflow.pk, args=[9]).status == "cancelled"


def test_a_step_failing_between_a_requeues_lock_and_its_resume_does_not_deadlock(caplog):
    """The requeue locks the workflow, then resumes it (its cancelled steps made waiting). A
    failure of another member in between must wait for the workflow's row before it touches a
    step: it once locked the cancelled steps first (an unused CTE runs last, after those
    declared below it), and each waited for the other until PostgreSQL cancelled one."""
    later = timezone.now() + timedelta(hours=1)
    second = wf.ship.using(run_after=later, queue="second").s(2)
    workflow = chain(group(wf.ship.s(1), second), wf.email.s(9)).enqueue()
    run_jobs()  # ship 1 is dead-lettered (no stock), the workflow fails, email is cancelled
    letter = dead_letter_of(workflow, 1)
    Job.objects.filter(workflow_id=workflow.pk, args=[2]).update(run_after=timezone.now())
    locked, go = threading.Event(), threading.Event()

    def requeue() -> list[int]:
        with transaction.atomic():
            db.execute(connection, "lock_dead_letter_workflows", {"ids": [letter]})
            locked.set()
            assert go.wait(30)
            return operations.requeue_dead_letters(connection, [letter])

    requeuing = Beside(requeue)
    assert locked.wait(30)
    failing = Beside(lambda: run_jobs(queues=["second"]))  # ship 2 fails, its last attempt
    wait_until(lambda: failing.finished.is_set() or waiting_on_a_lock(), timeout=10)
    go.set()

    assert len(requeuing.result() or []) == 1, "the requeue failed (a deadlock?)"
    assert failing.result().dead_lettered == 1
    # PostgreSQL ends a deadlock by failing one side: the worker's statement, retried
    assert "deadlock" not in caplog.text
    assert Workflow.objects.get(pk=workflow.pk).state == "failed"
    assert Job.objects.get(workflow_id=workflow.pk, args=[9]).status == "cancelled"


def test_an_abort_that_deadlocks_with_a_completing_step_goes_again(other_connection):
    """The abort locks the workflow's row, then its jobs'; a step completing at that moment
    holds its job's row and waits for the workflow's. PostgreSQL ends one of them (the one that
    waited first: here the abort); the abort, rolled back whole, goes again and aborts."""
    workflow = chain(wf.crunch.s(0), wf.email.s(0)).enqueue()
    running = workflow.job_ids[0]
    Job.objects.filter(pk=running).update(status="running", started_at=timezone.now())
    other_connection.execute("BEGIN")
    # as the completion of the running step: its job's row first
    other_connection.execute("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [running])
    outcome: list = []

    def abort() -> None:
        try:
            outcome.append(abort_workflow(workflow.pk, requested_by="a test"))
        except Exception as error:  # noqa: BLE001 (reported by the assertion below)
            outcome.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=abort)
    thread.start()
    wait_until(waiting_on_a_lock, timeout=10)
    # then the workflow's row, which the abort holds: a deadlock, found after deadlock_timeout
    try:
        other_connection.execute(
            "SELECT 1 FROM pgjobs_workflow WHERE id = %s FOR UPDATE", [workflow.pk]
        )
    except psycopg.errors.DeadlockDetected:  # ended first on a slow machine: nothing to retry
        pass
    other_connection.execute("ROLLBACK")
    thread.join(30)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    assert outcome[0]["aborted"] and outcome[0]["requested"] == [running]
    assert Workflow.objects.get(pk=workflow.pk).state == "aborted"
