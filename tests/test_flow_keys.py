"""The rows of flow keys (pgjobs_flow_key) against their pruning (docs/howto/flow-control.md):
a key is deleted only when no job will wait on it, and a key written again (by a requeue after
its pruning, or by an enqueue that met the pruner) has its job's limits. Two real connections
interleave the statements where the order matters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone
from helpers import wait_until, waiting_on_a_lock

from django_pgjobs import job, operations
from django_pgjobs.flow import prune_flow_keys
from django_pgjobs.models import DeadLetter, FlowKey, Job
from django_pgjobs.repair import requeue_edited
from django_pgjobs.sql import query
from django_pgjobs.testing import run_jobs
from testproject.handlers import flow

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 24 * 3600.0
#: Whether the jobs below fail (their dead letters are made with it on, then requeued off).
partner_down = threading.Event()


def _call(n: int) -> None:
    if partner_down.is_set():
        raise RuntimeError(f"call {n}: the partner is down")


#: A partner's API taking one call a minute (a bucket of one: the next token in a minute).
SLOW_PARTNER = job(name="flow_keys_slow_partner", queue="flow", rate_limit="1/m", max_attempts=1)(
    _call
)
#: At most three exports at once of one account (its concurrency key).
EXPORT = job(name="flow_keys_export", queue="flow", concurrency_limit=3, max_attempts=1)(_call)


@pytest.fixture
def failing() -> Iterator[None]:
    partner_down.set()
    yield
    partner_down.clear()


def age_keys() -> None:
    """Every key last served or written two days ago: idle for a day, the pruner's to delete."""
    long_ago = timezone.now() - timedelta(days=2)
    FlowKey.objects.update(last_served_at=long_ago, refilled_at=long_ago)


def dead_letters_of_slow_partner(count: int) -> list[int]:
    """``count`` dead letters of SLOW_PARTNER, made at its rate (a minute passes for its bucket
    before each run), then its key pruned."""
    SLOW_PARTNER.enqueue_many([(n,) for n in range(count)])
    for _ in range(count):
        FlowKey.objects.update(refilled_at=timezone.now() - timedelta(minutes=1))
        assert run_jobs().dead_lettered == 1
    FlowKey.objects.update(ready_at=timezone.now())  # a minute on: its next token is due
    assert run_jobs().succeeded == 0  # and the claim finds nothing of it: idle
    age_keys()
    assert prune_flow_keys(connection) == 1
    return sorted(DeadLetter.objects.values_list("id", flat=True))


@pytest.mark.parametrize(
    "requeue",
    [
        lambda ids: operations.requeue_dead_letters(connection, ids),
        lambda ids: operations.requeue_dead_letters_spread(connection, ids, 0.001),
    ],
    ids=["requeue", "replay"],
)
def test_dead_letters_requeued_after_their_key_was_pruned_keep_its_rate_limit(
    failing, requeue: Callable[[list[int]], object]
):
    """Written again by the requeue with one job at a time and no rate, the key let three calls
    of a one-a-minute partner go in a row, as fast as each ended."""
    ids = dead_letters_of_slow_partner(3)
    partner_down.clear()

    requeue(ids)

    assert run_jobs().succeeded == 1  # its bucket's one token; the next in a minute
    assert Job.objects.filter(name=SLOW_PARTNER.name, status="ready").count() == 2
    key = FlowKey.objects.get(key=f"job:{SLOW_PARTNER.name}")
    assert (key.rate, key.burst, key.concurrency_limit) == (pytest.approx(1 / 60), 1.0, None)


def test_a_dead_letter_requeued_with_new_arguments_after_its_key_was_pruned_keeps_its_limit(
    failing,
):
    edited, plain = dead_letters_of_slow_partner(2)
    partner_down.clear()

    requeue_edited(connection, edited, SLOW_PARTNER.name, [8], {}, by="test")
    operations.requeue_dead_letters(connection, [plain])

    assert run_jobs().succeeded == 1
    key = FlowKey.objects.get(key=f"job:{SLOW_PARTNER.name}")
    assert (key.rate, key.burst, key.concurrency_limit) == (pytest.approx(1 / 60), 1.0, None)


def test_a_concurrency_keys_requeued_jobs_get_their_jobs_limit_back(failing):
    """A key of `.using(concurrency_key=...)` holds the job's concurrency_limit (3), not one."""
    for n in range(3):
        EXPORT.using(concurrency_key="account:1").enqueue(n)
    assert run_jobs().dead_lettered == 3
    age_keys()
    assert prune_flow_keys(connection) == 1
    partner_down.clear()
    operations.requeue_dead_letters(
        connection, list(DeadLetter.objects.values_list("id", flat=True))
    )
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    assert len(operations.claim_jobs_flow(connection, claims.take(10), lanes=10).claimed) == 3
    assert FlowKey.objects.get(key="key:account:1").concurrency_limit == 3


@pytest.mark.parametrize("writer", ["enqueue", "requeue"])
def test_a_job_written_while_the_pruner_holds_its_key_writes_the_key_again(
    failing, other_connection, writer
):
    """The pruner's statement locks the idle keys (FOR UPDATE SKIP LOCKED), then deletes those
    with no job ready nor running that it can see. An enqueue (or requeue) of a job of such a
    key in between finds the key there, waits for the pruner to update it, and finds it
    deleted: it writes it again, with its limits. (The enqueue's insert of the key runs after
    its update, flow_key_told: the other way round, its job was committed with no key, and
    no claim ever took it.)"""
    EXPORT.using(concurrency_key="account:2").enqueue(0)
    assert run_jobs().dead_lettered == 1
    partner_down.clear()
    age_keys()
    (dead,) = DeadLetter.objects.values_list("id", flat=True)
    write = {
        "enqueue": lambda: EXPORT.using(concurrency_key="account:2").enqueue(1),
        "requeue": lambda: operations.requeue_dead_letters(connection, [dead]),
    }[writer]
    other_connection.execute("BEGIN")  # the pruner, its key locked, not deleted yet
    other_connection.execute("SELECT FROM pgjobs_flow_key WHERE key = 'key:account:2' FOR UPDATE")
    written = threading.Thread(target=_in_thread, args=(write,))
    written.start()
    wait_until(waiting_on_a_lock, timeout=10, interval=0.01)
    pruned = other_connection.execute(query("prune_flow_keys"), {"idle_seconds": DAY}).fetchall()
    other_connection.execute("COMMIT")
    written.join(10)

    assert pruned == [("key:account:2",)]
    key = FlowKey.objects.get(key="key:account:2")
    assert key.concurrency_limit == 3 and key.ready_at is not None
    assert run_jobs().succeeded == 1


def _in_thread(write: Callable[[], object]) -> None:
    try:
        write()
    finally:
        connections.close_all()


def test_a_key_a_claim_marks_idle_while_its_job_is_being_enqueued_is_not_pruned():
    """A claim that cannot see a job being enqueued (its key already due: that enqueue did not
    write it) marks the key idle; the rescue makes it due again. Last served over a day ago
    (its job ran for a day), the key was pruned at once, before that enqueue committed, and
    its job waited on no key for good."""
    flow.sync_order.using(concurrency_key="order:21").enqueue(21, 0)
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    (long_job,) = operations.claim_jobs_flow(connection, claims.take(1), lanes=1).claimed
    age_keys()  # it ran for a day
    operations.complete(connection, [long_job])  # its key stays due: the next claim decides
    written = threading.Event()
    commit = threading.Event()

    def enqueue_and_hold() -> None:
        try:
            with transaction.atomic():
                flow.sync_order.using(concurrency_key="order:21").enqueue(21, 1)
                written.set()
                commit.wait(10)
        finally:
            connections.close_all()

    enqueuer = threading.Thread(target=enqueue_and_hold)
    enqueuer.start()
    assert written.wait(10)
    assert operations.claim_jobs_flow(connection, claims.take(1), lanes=1).claimed == []
    assert FlowKey.objects.get(key="key:order:21").ready_at is None  # idle, for this claim
    pruned = prune_flow_keys(connection)
    commit.set()
    enqueuer.join(10)

    assert pruned == 0
    operations.rescue(connection)  # what every worker runs at its rescue interval
    assert run_jobs().succeeded == 1


def test_a_rate_limited_key_made_idle_keeps_its_bucket():
    """The claim that makes a key idle brings its bucket up to now (``refilled_at``: when it
    went idle, for the pruner) with the tokens it holds by then: its next call still waits for
    the token it was waiting for, no longer."""
    SLOW_PARTNER.enqueue(1)
    assert run_jobs().succeeded == 1
    half_a_minute_ago = timezone.now() - timedelta(seconds=30)
    FlowKey.objects.update(tokens=0, refilled_at=half_a_minute_ago, ready_at=timezone.now())
    assert run_jobs().succeeded == 0  # nothing of it due nor out: idle
    key = FlowKey.objects.get()
    assert key.ready_at is None and key.refilled_at > half_a_minute_ago
    assert key.tokens == pytest.approx(0.5, abs=0.05)
    SLOW_PARTNER.enqueue(2)
    due = FlowKey.objects.get().ready_at - timezone.now()
    assert timedelta(seconds=27) < due <= timedelta(seconds=30)  # half a token to go, at 1/m
