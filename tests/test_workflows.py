"""Workflows (docs/howto/workflows.md; invariant 19): chains and groups written in one statement,
run by real ``runjobs`` processes, their progress counted in the database."""

from __future__ import annotations

import time
from collections import Counter as Tally

import pytest
from django.db import transaction
from helpers import FAST_LEASES, wait_until

from django_pgjobs import chain, db, group
from django_pgjobs.models import DeadLetter, Job, QueueState, Workflow
from django_pgjobs.operations import requeue_dead_letters
from django_pgjobs.repair import requeue_edited
from testproject.demo.models import Counter, Execution
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = ("--queue", "workflows", "--concurrency", "4")


def place_order(order_id: int):
    # charge, then ship, then email: each step once the one before has succeeded
    return chain(wf.charge.s(order_id), wf.ship.s(order_id), wf.email.s(order_id)).enqueue()


def build_album(album: str, image_ids: list[int]):
    # resize every image at once, then build the zip once, after the last resize (a chord)
    return chain(group(wf.resize.s(i) for i in image_ids), wf.build_zip.s(album)).enqueue()


def signup_with_welcome(order_id: int):
    with transaction.atomic():
        Counter.objects.create(name=f"order-{order_id}")
        # the workflow commits with the counter, or neither is written
        return place_order(order_id)


def labels_in_order() -> list[str]:
    return list(Execution.objects.order_by("at", "id").values_list("label", flat=True))


def state_of(workflow) -> str:
    return Workflow.objects.get(pk=workflow.pk).state


def test_a_three_step_chain_runs_in_order(start_worker):
    workflow = chain(wf.charge.s(1), wf.resize.s(2), wf.email.s(1)).enqueue()
    assert list(Job.objects.filter(workflow=workflow).order_by("workflow_step").values_list(
        "status", flat=True)) == ["ready", "blocked", "blocked"]  # fmt: skip
    for _ in range(3):
        start_worker(*WORKERS)
    wait_until(lambda: state_of(workflow) == "succeeded", timeout=60)
    assert labels_in_order() == ["charge-1", "resize-2", "email-1"]
    # each step started after the one before had finished
    runs = list(Execution.objects.order_by("at").values_list("job_id", "at"))
    assert [job_id for job_id, _ in runs] == workflow.job_ids


def test_a_chain_enqueued_in_a_rolled_back_transaction_leaves_nothing(start_worker):
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        Counter.objects.create(name="order")
        workflow = chain(wf.charge.s(1), group(wf.resize.s(i) for i in range(5)), wf.email.s(1))
        saved = workflow.enqueue()
        assert Job.objects.filter(workflow_id=saved.pk).count() == 7  # visible inside
        raise Undo
    assert not Workflow.objects.exists() and not Job.objects.exists()
    assert not Counter.objects.exists()
    # and committed, it is all there at once
    saved = signup_with_welcome(3)
    assert Job.objects.filter(workflow_id=saved.pk).count() == 3 and Counter.objects.exists()


def test_a_failing_middle_step_stops_the_chain_and_requeueing_it_completes_it(start_worker):
    workflow = place_order(7)
    start_worker(*WORKERS)
    start_worker(*WORKERS)
    wait_until(lambda: DeadLetter.objects.exists(), timeout=60)
    wait_until(lambda: state_of(workflow) == "failed", timeout=30)
    stored = Workflow.objects.get(pk=workflow.pk)
    assert "step 1 (" in stored.reason and "out of stock" in stored.reason
    email_job = Job.objects.get(workflow=workflow, workflow_step=2)
    assert email_job.status == "cancelled"
    assert labels_in_order() == ["charge-7"]
    Counter.objects.create(name="stock", value=1)
    dead = DeadLetter.objects.get()
    assert (dead.workflow_id, dead.workflow_step) == (workflow.pk, 1)
    assert requeue_dead_letters(db.jobs_connection(), [dead.pk])
    wait_until(lambda: state_of(workflow) == "succeeded", timeout=60)
    assert labels_in_order() == ["charge-7", "ship-7", "email-7"]
    assert not DeadLetter.objects.exists()


def test_a_group_of_50_runs_its_callback_once_after_all_with_workers_sigkilled(start_worker):
    workflow = build_album("album", list(range(50)))
    workers = [start_worker(*WORKERS, env=FAST_LEASES) for _ in range(3)]
    for victim in workers[:2]:  # killed mid-group, one after the other
        done = Execution.objects.count()
        wait_until(lambda done=done: Execution.objects.count() >= done + 8, timeout=60)
        victim.kill()
        start_worker(*WORKERS, env=FAST_LEASES)
    try:
        wait_until(lambda: state_of(workflow) == "succeeded", timeout=90)
    except AssertionError:
        raise AssertionError(
            (
                Workflow.objects.filter(pk=workflow.pk).values().get(),
                Tally(Job.objects.values_list("status", "workflow_step")),
                list(DeadLetter.objects.values_list("reason", flat=True)),
                workers[2].output()[-3000:],
            )
        ) from None
    tally = Tally(labels_in_order())
    zips = [label for label in tally if label.startswith("zip-")]
    # exactly once, with the 50 results of the group in order (sum of 10 * i)
    assert zips == [f"zip-album:50:{sum(10 * i for i in range(50))}"] and tally[zips[0]] == 1
    assert {label for label in tally if label.startswith("resize-")} == {
        f"resize-{i}" for i in range(50)
    }
    last_member = Execution.objects.filter(label__startswith="resize-").latest("at").at
    assert Execution.objects.get(label=zips[0]).at >= last_member


def test_10000_members_are_enqueued_in_one_statement_and_the_callback_runs_once(
    start_worker, django_assert_max_num_queries
):
    started = time.monotonic()
    with django_assert_max_num_queries(3):
        workflow = chain(group(wf.touch.s(i) for i in range(10_000)), wf.email.s(0)).enqueue()
    enqueued = time.monotonic() - started
    assert Job.objects.filter(workflow=workflow).count() == 10_001
    for _ in range(3):
        start_worker(*WORKERS, "--batch-size", "100")
    wait_until(lambda: state_of(workflow) == "succeeded", timeout=240, interval=0.2)
    drained = time.monotonic() - started - enqueued
    assert labels_in_order() == ["email-0"]
    print(f"10,000-member group: enqueued in {enqueued:.2f}s, drained in {drained:.2f}s")


def test_an_edited_middle_step_requeued_from_its_dead_letter_completes_the_chain(start_worker):
    workflow = place_order(7)
    start_worker(*WORKERS)
    wait_until(lambda: state_of(workflow) == "failed", timeout=60)
    Counter.objects.create(name="stock", value=1)
    dead = DeadLetter.objects.get()
    # the queue paused while the requeued row is read: the running worker would run it at once
    QueueState.objects.update_or_create(name=dead.queue, defaults={"paused": True})
    # the operator fixes the order number while requeueing (the admin's "Edit and requeue")
    job_id = requeue_edited(db.jobs_connection(), dead.pk, dead.name, [8], {}, by="a test")
    requeued = Job.objects.get(pk=job_id)
    assert (requeued.workflow_id, requeued.workflow_step) == (workflow.pk, 1)
    QueueState.objects.filter(name=dead.queue).update(paused=False)
    wait_until(lambda: state_of(workflow) == "succeeded", timeout=60)
    assert labels_in_order() == ["charge-7", "ship-8", "email-7"]


@pytest.mark.parametrize("ids, single", [([5], False), ([5, 6], False), ([5], True)])
def test_a_group_of_one_job_gives_its_callback_a_list_as_any_group(ids, single):
    """``group(resize.s(i) for i in ids)`` with one id is still a group: its callback reads a
    list of one (``len()``, ``sum()`` work), where a plain step before it gives its value."""
    from django_pgjobs.testing import run_jobs

    first = wf.resize.s(ids[0]) if single else group(wf.resize.s(i) for i in ids)
    workflow = chain(first, wf.record_previous.s("album")).enqueue()
    assert Workflow.objects.get(pk=workflow.pk).groups == ([] if single else [0])
    run_jobs(with_scheduled=True)
    expected = str(ids[0] * 10) if single else str([i * 10 for i in ids])
    assert Execution.objects.filter(label=f"previous-album:{expected}").exists(), list(
        Execution.objects.values_list("label", flat=True)
    )


@pytest.mark.parametrize("keep_succeeded", [0, 3600])
def test_previous_results_of_a_step_whose_jobs_kept_none_say_so_not_a_shorter_list(
    settings, keep_succeeded
):
    """A member that did not keep its result: the callback's previous_results() raises, naming
    what to do, instead of returning the others' results out of the group's order. With
    KEEP_SUCCEEDED_SECONDS on, that member's row stays (successful, no result): it does not
    count as a kept result (None in the list, once)."""
    from django_pgjobs.testing import run_jobs

    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": keep_succeeded}

    images = [wf.resize.s(1), wf.resize.using(keep_result=False).s(2), wf.resize.s(3)]
    workflow = chain(group(images), wf.build_zip.using(max_attempts=1).s("album")).enqueue()
    run_jobs(with_scheduled=True)
    (dead,) = DeadLetter.objects.filter(workflow_id=workflow.pk)
    assert dead.name == wf.build_zip.name and dead.error_type == "LookupError"
    assert "1 of the 3 jobs of step 0" in dead.reason and "keep_result=True" in dead.reason
    assert not Execution.objects.filter(label__startswith="zip-").exists()
