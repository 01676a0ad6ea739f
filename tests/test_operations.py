"""The database contract in operations.py: claim, fencing, rescue, release, requeue."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from django.db import connection
from helpers import count, database_url_for_tests, insert_jobs, wait_until

from django_pgjobs import errors, operations
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.sql import query
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def claims(worker="test", queues=None, prepared=False):
    return operations.ClaimBuilder(
        worker=worker, queues=queues, lease_seconds=30, prepared=prepared
    )


def claim(limit=10, queues=None, worker="test"):
    return operations.complete(connection, claim=claims(worker, queues).take(limit)).claimed


def error(attempt=1):
    return errors.error_entry(attempt, RuntimeError("x"))


def test_claim_counts_attempt_and_sets_lease_and_token():
    demo.record.enqueue("a")
    (job,) = claim()
    row = Job.objects.get(pk=job.id)
    assert row.status == "running" and row.attempts == 1 == job.attempts
    assert row.claim_token == job.claim_token and row.worker == "test"
    assert 25 < (row.lease_expires_at - row.started_at).total_seconds() <= 30
    assert claim() == []


def test_claim_uses_partial_index():
    """EXPLAIN proves the claim walks pgjobs_job_claim_idx, whatever the history size."""
    with connection.cursor() as cursor:
        insert_jobs(cursor, 50000, status="successful")
        insert_jobs(cursor, 200)
        cursor.execute("ANALYZE pgjobs_job")
        for queues in (None, ["default", "other"]):
            params = claims("w", queues).take(10).params
            cursor.execute("EXPLAIN " + query("claim_jobs"), params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "pgjobs_job_claim_idx" in plan, plan


def table_scans(conn: psycopg.Connection) -> tuple[int, int]:
    """(sequential scans, index scans) of pgjobs_job so far, as the statistics collector has them."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        "SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'pgjobs_job'"
    ).fetchone()


@pytest.mark.parametrize("prepared", [False, True], ids=["planned", "prepared"])
def test_claims_after_an_idle_spell_still_walk_the_index(other_connection, prepared):
    """A worker idling on an empty queue claims nothing many times; then a burst arrives. Each
    claim must still walk the partial index. A server-side prepared claim left to PostgreSQL's
    default switched to a generic plan made from the empty table's statistics and scanned the
    whole table at every claim until the next ANALYZE (see operations.py); the worker's
    prepared claim is planned at every run."""
    other_connection.execute("VACUUM ANALYZE pgjobs_job")  # what an idle table looks like
    idle = claims("w", prepared=prepared)
    for _ in range(8):
        assert operations.complete(connection, claim=idle.take(50)) == (set(), [])
    insert_jobs(other_connection, 20000)
    with connection.cursor() as cursor:  # report this backend's counters at its next idle
        cursor.execute("SELECT pg_stat_force_next_flush()")
    before = table_scans(other_connection)
    _, claimed = operations.complete(connection, claim=idle.take(50))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    assert len(claimed) == 50
    # the claim's scans reach the statistics (sequential or index, whichever it made)
    wait_until(lambda: sum(table_scans(other_connection)) > sum(before), timeout=10, interval=0.05)
    seq_scans, index_scans = table_scans(other_connection)
    assert seq_scans == before[0], "the claim scanned the whole table"
    assert index_scans > before[1]


def test_concurrent_claims_skip_each_others_rows_without_blocking():
    demo.record.enqueue_many([(str(i),) for i in range(10)])
    statement = query("claim_jobs")
    params = claims("a").take(4).params
    url = database_url_for_tests()
    with psycopg.connect(url) as first, psycopg.connect(url) as second:
        # first claims inside an open transaction: its rows stay locked
        a = {r[0] for r in first.execute(statement, params).fetchall()}
        second.execute("SET lock_timeout = '1s'")  # would raise if the claim had to wait
        b = {r[0] for r in second.execute(statement, {**params, "token": uuid.uuid4()}).fetchall()}
        assert len(a) == 4 and len(b) == 4 and not a & b
        first.rollback()
        second.commit()
    assert Job.objects.filter(status="running").count() == 4


@pytest.mark.parametrize("prepared", [False, True], ids=["planned", "prepared"])
def test_parallel_claimers_never_share_a_job(prepared):
    demo.noop.enqueue_many([() for _ in range(600)])
    claimed: list[list[int]] = []
    lock = threading.Lock()

    def claimer():
        from django.db import connections

        mine = []
        try:
            while True:
                _, jobs = operations.complete(  # the claim alone: nothing done
                    connections["default"],
                    claim=claims(threading.current_thread().name, prepared=prepared).take(7),
                )
                if not jobs:
                    break
                mine.extend(j.id for j in jobs)
        finally:
            connections.close_all()
        with lock:
            claimed.append(mine)

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for mine in claimed for i in mine]
    assert len(every) == 600 == len(set(every))


def test_completion_and_failure_are_fenced_by_the_claim_token():
    demo.record.enqueue("fenced")
    (job,) = claim()
    stale = operations.ClaimedJob(**{**job.__dict__, "claim_token": uuid.uuid4()})
    assert operations.complete(connection, [stale]).ids == set()
    assert operations.retry_job(connection, stale, error(), 0) is False
    assert operations.dead_letter_job(connection, stale, reason="r", error=error()) is None
    assert operations.release_jobs(connection, [stale]) == set()
    assert operations.extend_leases(connection, [stale]) == set()
    row = Job.objects.get(pk=job.id)
    assert row.status == "running" and row.errors == []
    assert operations.complete(connection, [job]).ids == {job.id}
    assert not Job.objects.exists()


def test_rescue_requeues_expired_leases_and_buries_exhausted_ones():
    demo.record.enqueue("will-retry")
    demo.record.using(max_attempts=1).enqueue("last-attempt")
    jobs = claim()
    assert len(jobs) == 2
    Job.objects.update(lease_expires_at="2000-01-01T00:00:00Z")
    assert operations.rescue_expired(connection) == (1, 1)
    requeued = Job.objects.get()
    assert requeued.status == "ready" and requeued.attempts == 1 and requeued.claim_token is None
    assert requeued.errors[0]["type"] == "LeaseExpired"
    dead = DeadLetter.objects.get()
    assert dead.args == ["last-attempt"] and dead.error_type == "LeaseExpired"
    assert "lease of the last attempt expired" in dead.reason
    # the old holder can no longer complete either of them
    assert operations.complete(connection, jobs).ids == set()


def test_release_hands_back_without_spending_an_attempt():
    demo.record.enqueue("x")
    (job,) = claim()
    assert operations.release_jobs(connection, [job]) == {job.id}
    row = Job.objects.get()
    assert row.status == "ready" and row.attempts == 0 and row.claim_token is None


def test_dead_letter_move_is_one_statement_keeping_everything(django_assert_num_queries):
    enqueued = demo.record.using(priority=7, unique_key="k").enqueue("x", sleep=0)
    (job,) = claim()
    with django_assert_num_queries(1):
        dead_id = operations.dead_letter_job(connection, job, reason="because", error=error())
    dead = DeadLetter.objects.get(pk=dead_id)
    assert (dead.job_id, dead.name, dead.priority, dead.unique_key) == (
        enqueued.pk,
        enqueued.name,
        7,
        "k",
    )
    assert dead.args == ["x"] and dead.kwargs == {"sleep": 0}
    assert dead.attempts == 1 and dead.reason == "because" and len(dead.errors) == 1
    assert not Job.objects.exists()


#: The flow keys' limits a requeue statement takes (operations.requeued_key_limits): none here.
NO_FLOW_KEYS = {"flow_keys": [], "flow_limits": [], "flow_rates": [], "flow_bursts": []}


def test_requeue_is_atomic_and_concurrent_requeues_make_one_job():
    demo.always_fails.using(max_attempts=1).enqueue("dead")
    (job,) = claim()
    dead_id = operations.dead_letter_job(connection, job, reason="r", error=error())
    url = database_url_for_tests()
    statement = query("requeue_dead_letters")
    with psycopg.connect(url) as first, psycopg.connect(url) as second:
        made_first = first.execute(
            statement,
            {
                "ids": [dead_id],
                "spacing": 0,
                "previous_due": None,
                "requested_by": None,
                "action": "",
                **NO_FLOW_KEYS,
            },
        ).fetchall()
        results = []
        waiter = threading.Thread(
            target=lambda: results.append(
                second.execute(
                    statement,
                    {
                        "ids": [dead_id],
                        "spacing": 0,
                        "previous_due": None,
                        "requested_by": None,
                        "action": "",
                        **NO_FLOW_KEYS,
                    },
                ).fetchall()
            )
        )
        waiter.start()  # blocks on the row lock held by `first`
        waiter.join(0.3)
        first.commit()
        waiter.join(10)
        second.commit()
    assert len(made_first) == 1 and results == [[]]
    requeued = Job.objects.get()
    assert requeued.attempts == 0 and requeued.status == "ready"
    assert len(requeued.errors) == 1  # the history comes back with it
    assert not DeadLetter.objects.exists()


def test_admin_style_operations():
    waiting = demo.record.using(delay=3600).enqueue("later")
    running = demo.record.enqueue("now")
    claim(limit=1)
    assert operations.run_jobs_now(connection, [waiting.pk, running.pk]) == [waiting.pk]
    assert Job.objects.get(pk=waiting.pk).view == "due"
    assert operations.cancel_jobs(connection, [waiting.pk, running.pk]) == [waiting.pk]
    assert Job.objects.filter(pk=running.pk).exists()
    assert count_rows() == 1


def count_rows() -> int:
    with psycopg.connect(database_url_for_tests()) as conn:
        return count(conn, "SELECT count(*) FROM pgjobs_job")
