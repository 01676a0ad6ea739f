"""A claim for one kind of job while the other kind's slots are full (``claim_jobs_skipping``):
it looks among the first 1,000 due jobs, not past a whole backlog of the full kind."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid

import pytest
from django.db import connection

from django_pgjobs import enqueue_many, operations, sql
from django_pgjobs.claims import ClaimBuilder, ClaimPlan
from django_pgjobs.models import Job
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)

SYNC, ASYNC = demo.noop.name, demo.record_async.name


def placeholders(name: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", sql.query(name)))


def async_only_claim(prepared: bool = False):
    """What a worker whose sync slots are all full claims: async jobs only, up to 5."""
    builder = ClaimBuilder(worker="w", queues=None, lease_seconds=60, prepared=prepared)
    plan = ClaimPlan(
        limit=5, sync_room=0, sync_starts=0, async_room=5, async_starts=5, async_names=[ASYNC]
    )
    return builder.claim(plan, skip_names=[SYNC])


@pytest.mark.parametrize("prepared", [False, True])
def test_it_finds_the_other_kind_among_the_first_thousand_due_jobs_only(prepared):
    enqueue_many(demo.noop, [((), {})] * 999)
    first = demo.record_async.enqueue("within")  # the 1,000th due job
    enqueue_many(demo.noop, [((), {})] * 500)
    beyond = demo.record_async.enqueue("beyond")  # the 1,501st
    claimed = operations.complete(connection, claim=async_only_claim(prepared)).claimed
    assert [job.id for job in claimed] == [first.id]
    assert operations.complete(connection, claim=async_only_claim(prepared)).claimed == []
    urgent = demo.record_async.using(priority=10).enqueue("urgent")  # the head of the queue
    claimed = operations.complete(connection, claim=async_only_claim(prepared)).claimed
    assert [job.id for job in claimed] == [urgent.id]
    assert Job.objects.get(id=beyond.id).status == "ready"  # for the next claim of any kind
    everything = ClaimBuilder(worker="w", queues=None, lease_seconds=60).take(2000)
    taken = operations.complete(connection, claim=everything).claimed
    assert beyond.id in {job.id for job in taken}
    assert not any(job.name == SYNC for job in claimed)


def test_the_windowed_claim_carries_the_acknowledgements_as_the_plain_one_does():
    """One statement completes the jobs (fenced as ever: one held under another token stays)
    and claims, windowed (``complete_and_claim_jobs_skipping``)."""
    enqueue_many(demo.noop, [((), {})] * 3)
    take_three = ClaimBuilder(worker="w", queues=None, lease_seconds=60).take(3)
    held = operations.complete(connection, claim=take_three).claimed
    wanted = demo.record_async.enqueue("next")
    not_ours = dataclasses.replace(held[2], claim_token=uuid.uuid4())
    done = operations.complete(connection, [*held[:2], not_ours], claim=async_only_claim())
    assert done.ids == {held[0].id, held[1].id}
    assert [job.id for job in done.claimed] == [wanted.id]
    assert set(Job.objects.values_list("id", flat=True)) == {held[2].id, wanted.id}


def test_it_takes_the_parameters_of_the_claim_it_replaces():
    """All but ``any_name``: it always skips."""
    assert placeholders("claim_jobs_skipping") == placeholders("claim_jobs") - {"any_name"}


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


@pytest.mark.parametrize("skipping", [False, True])
def test_its_cost_stays_bounded_when_the_statistics_say_the_table_is_empty(skipping):
    """A queue's table is often vacuumed nearly empty, then fills in a burst: the planner
    believes a few rows. Each claim must still reach its jobs by their keys (or the ctid it
    locked them at), not walk the table once per job: no step of the plan runs more often than
    the window has jobs (1,000), nor reads the table's 5,000."""
    enqueue_many(demo.noop, [((), {})] * 5000)
    last = Job.objects.latest("id")
    Job.objects.exclude(id=last.id).delete()  # the last page keeps a row: no truncation
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgjobs_job")  # its pages, 1 row: a density of ~0
    enqueue_many(demo.noop, [((), {})] * 5000)
    builder = ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    claim = async_only_claim() if skipping else builder.take(32)
    name = "claim_jobs_skipping" if skipping else "claim_jobs"
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.query(name), claim.params)
        plan = cursor.fetchone()[0]
    plan = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    steps = list(nodes(plan))
    assert max(step["Actual Loops"] for step in steps) <= 1000
    assert max(step["Actual Rows"] for step in steps) <= 1000
    assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] < 10_000
