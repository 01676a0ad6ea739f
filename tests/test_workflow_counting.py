"""Invariant 19 at the statement level: a group's completion is counted in the database. Two
members acknowledged at the same moment release the step after exactly once; an acknowledgement
from a worker that lost its lease counts nothing; a dead-lettered step cancels the later ones."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from django.db import connection
from helpers import database_url_for_tests, wait_until, waiting_on_a_lock

from django_pgjobs import chain, group, operations
from django_pgjobs.models import DeadLetter, Job, Workflow
from django_pgjobs.sql import query
from testproject.handlers import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def claim_all() -> list[operations.ClaimedJob]:
    builder = operations.ClaimBuilder(worker="t", queues=["workflows"], lease_seconds=30)
    return operations.complete(connection, claim=builder.take(100)).claimed


def ack(conn: psycopg.Connection, job: operations.ClaimedJob) -> list:
    params = {"ids": [job.id], "tokens": [job.claim_token]}
    return conn.execute(query("complete_workflow_jobs"), params).fetchall()


def test_two_members_acknowledged_at_once_release_the_next_step_once():
    workflow = chain(group(wf.charge.s(1), wf.charge.s(2)), wf.email.s(1), wf.email.s(2)).enqueue()
    first, second = sorted(claim_all(), key=lambda job: job.id)
    url = database_url_for_tests()
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as other:
        assert ack(holder, first) == [(first.id,)]  # in a transaction: the workflow row locked
        finished = threading.Thread(target=ack, args=(other, second))
        finished.start()
        wait_until(waiting_on_a_lock, timeout=30)  # the second waits for the first's count
        holder.commit()
        finished.join(timeout=30)
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.step, stored.remaining, stored.state) == (1, 1, "running")
    statuses = list(Job.objects.order_by("id").values_list("workflow_step", "status"))
    assert statuses == [(1, "ready"), (2, "blocked")]  # released once, and only the next step


def test_an_acknowledgement_from_a_lost_lease_counts_nothing():
    workflow = chain(group(wf.charge.s(1), wf.charge.s(2)), wf.email.s(1)).enqueue()
    first, second = claim_all()
    stale = operations.ClaimedJob(**{**first.__dict__, "claim_token": uuid.uuid4()})
    for _ in range(2):  # a late ack, sent twice: neither counts
        assert operations.complete(connection, [stale]).ids == set()
    assert Workflow.objects.get(pk=workflow.pk).remaining == 2
    assert operations.complete(connection, [first, second]).ids == {first.id, second.id}
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.step, stored.remaining) == (1, 1)
    assert Job.objects.get(workflow_step=1).status == "ready"


def test_a_dead_lettered_step_fails_the_workflow_and_cancels_the_later_steps():
    workflow = chain(wf.charge.s(1), wf.ship.s(1), wf.email.s(1)).enqueue()
    (charged,) = claim_all()
    operations.complete(connection, [charged])
    (shipping,) = claim_all()
    error = {"type": "RuntimeError", "message": "out of stock"}
    dead_id = operations.dead_letter_job(connection, shipping, reason="no stock", error=error)
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.state == "failed" and stored.reason.endswith("was dead-lettered: no stock")
    assert Job.objects.get().status == "cancelled"  # email
    assert claim_all() == []
    operations.requeue_dead_letters(connection, [dead_id])
    assert Workflow.objects.get(pk=workflow.pk).state == "running"
    assert Job.objects.get(workflow_step=2).status == "blocked"
    (again,) = claim_all()
    assert again.name == wf.ship.name and not DeadLetter.objects.exists()
    operations.complete(connection, [again])
    (emailing,) = claim_all()
    operations.complete(connection, [emailing])
    assert Workflow.objects.get(pk=workflow.pk).state == "succeeded"


def test_with_retention_on_the_kept_jobs_are_counted_too(settings):
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": 60}
    workflow = chain(wf.charge.s(1), wf.resize.s(2), wf.email.s(1)).enqueue()
    (charged,) = claim_all()
    assert operations.complete(connection, [charged]).ids == {charged.id}
    (resizing,) = claim_all()
    assert operations.complete(connection, [resizing], results=["20"]).ids == {resizing.id}
    statuses = list(Job.objects.order_by("id").values_list("status", "result"))
    assert statuses == [("successful", None), ("successful", 20), ("ready", None)]
    assert Workflow.objects.get(pk=workflow.pk).step == 2
