"""The fast path: acknowledgements batched into the next claim, prepared enqueue statements, the
worker's prepared claim.

Batching must not weaken the guarantees: an acknowledgement only ever deletes a job still held
under its claim token, and a worker that dies with acknowledgements not yet sent loses nothing
(those jobs run again: at least once) while atomic jobs' effects still happen exactly once.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter as Tally
from importlib import resources

import pytest
from django.db import DatabaseError, connection, connections, transaction
from helpers import FAST_LEASES, WorkerProcess, count, insert_jobs, run_worker, wait_until

from django_pgjobs import db, operations, sql
from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution

pytestmark = pytest.mark.django_db(transaction=True)

#: The statements that complete jobs and claim in one round trip.
CARRYING_THE_CLAIM = [
    "complete_and_claim_jobs",
    "complete_retained_and_claim_jobs",
    "complete_with_results_and_claim_jobs",
]

# The backends of one process, told apart by the application_name it connects with.
BACKENDS = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name = %s"
)


def claims(worker="test", prepared=False) -> operations.ClaimBuilder:
    return operations.ClaimBuilder(worker=worker, queues=None, lease_seconds=60, prepared=prepared)


def claim(limit: int, done=()):
    return operations.complete(connection, list(done), claim=claims().take(limit))


def executions_by_label() -> Tally:
    return Tally(Execution.objects.values_list("label", flat=True))


def test_one_statement_acknowledges_the_last_batch_and_claims_the_next():
    demo.noop.enqueue_many([() for _ in range(5)])
    completed, first = claim(3)
    assert completed == set() and len(first) == 3
    completed, second = claim(3, done=first)
    assert completed == {job.id for job in first}
    assert len(second) == 2 and not {j.id for j in second} & completed
    assert set(Job.objects.values_list("id", flat=True)) == {job.id for job in second}
    completed, third = claim(3, done=second)
    assert completed == {job.id for job in second} and third == []
    assert not Job.objects.exists()


def test_batched_acknowledgement_is_fenced_by_the_claim_token(other_connection):
    demo.noop.enqueue_many([() for _ in range(3)])
    _, held = claim(3)
    stolen = held[0]
    # Its lease expired and another worker claimed it again: new token.
    other_connection.execute(
        "UPDATE pgjobs_job SET claim_token = gen_random_uuid() WHERE id = %s", (stolen.id,)
    )
    completed, _ = claim(0, done=held)
    assert completed == {held[1].id, held[2].id}
    assert list(Job.objects.values_list("id", flat=True)) == [stolen.id]


def test_batched_acknowledgement_keeps_rows_when_retention_is_on(settings):
    settings.PGJOBS = {**settings.PGJOBS, "KEEP_SUCCEEDED_SECONDS": 3600}
    demo.noop.enqueue_many([() for _ in range(2)])
    _, held = claim(2)
    completed, _ = claim(2, done=held)
    assert completed == {job.id for job in held}
    rows = Job.objects.all()
    assert all(r.status == "successful" and r.finished_at and r.claim_token is None for r in rows)


@pytest.mark.alone  # the acknowledgements ride on claims only when executors keep up
def test_worker_sends_fewer_statements_than_jobs(monkeypatch):
    calls = []  # every statement that completes or claims: all go through complete()
    original = operations.complete

    def counting(*args, **kwargs):
        calls.append(kwargs.get("claim") is not None)
        return original(*args, **kwargs)

    monkeypatch.setattr(operations, "complete", counting)
    labels = [f"batched-{i}" for i in range(300)]
    demo.record.enqueue_many([(label,) for label in labels[:150]])
    demo.record_atomic.enqueue_many([(label,) for label in labels[150:]])
    worker = run_worker(concurrency=4, batch_size=50, prefetch=50)
    assert worker.stats.succeeded == 300
    tally = executions_by_label()
    assert set(tally) == set(labels) and set(tally.values()) == {1}
    assert not Job.objects.exists()
    # Atomic jobs acknowledge themselves (one statement each, in their own transaction); the
    # 150 others share the claim statements: at least three a statement, claims included (a
    # machine whose commits took 2-3 ms made 32 of them; one acknowledgement each would be 156)
    assert len(calls) - 150 < 150 / 3


@pytest.mark.parametrize("name", CARRYING_THE_CLAIM)
def test_the_combined_statement_claims_through_the_partial_index(name):
    with connection.cursor() as cursor:
        insert_jobs(cursor, 200)
        cursor.execute("ANALYZE pgjobs_job")
    params = {
        "ids": [1, 2],
        "tokens": [uuid.uuid4(), uuid.uuid4()],
        "results": ["1", "2"],
        **claims().take(10).params,
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql.query(name), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pgjobs_job_claim_idx" in plan, plan


@pytest.mark.parametrize("name", CARRYING_THE_CLAIM)
def test_a_column_added_to_the_claim_reaches_every_statement_that_carries_it(name):
    """The row of completed ids that ends the combined statements has the claim's own columns
    (NULL), whatever they are: a column added to the claim's RETURNING cannot leave them out of
    step (a hand-written row of NULLs did, and the statement failed)."""
    statements, parts = sql._parse(
        resources.files(sql).joinpath("queries.sql").read_text(encoding="utf-8")
    )
    statements["claim_jobs"] += ", 42 AS added_column"  # the claim ends with its RETURNING list
    resolved, _ = sql._resolve({**statements, **parts})
    demo.noop.enqueue_many([() for _ in range(2)])
    _, (held,) = claim(1)
    params = {
        **claims().take(5).params,
        "ids": [held.id],
        "tokens": [held.claim_token],
        "results": ["null"],
    }
    with connection.cursor() as cursor:
        cursor.execute(resolved["claim_jobs"], claims().take(0).params)  # the claim alone
        claim_columns = [column.name for column in cursor.description]
        cursor.execute(resolved[name], params)
        columns = [column.name for column in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    assert "added_column" in claim_columns and columns == [*claim_columns, "completed"]
    claimed = [row for row in rows if row["id"] is not None]
    (acknowledged,) = [row for row in rows if row["id"] is None]
    assert [row["added_column"] for row in claimed] == [42]
    assert acknowledged["completed"] == [held.id] and acknowledged["added_column"] is None


def prepared_statements(conn) -> int:
    with conn.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return cursor.fetchone()[0]


def test_enqueue_is_prepared_once_per_connection_and_other_statements_only_when_asked():
    before = prepared_statements(connection)
    for _ in range(4):
        demo.noop.enqueue()
    assert prepared_statements(connection) == before + 1  # one statement, prepared once
    for _ in range(8):  # past the five runs after which a prepared statement may go generic
        done, held = claim(1)
        operations.extend_leases(connection, held)
        operations.complete(connection, held)
    # not asked to (prepared=False): unprepared, planned at every run (tests/test_operations.py)
    assert prepared_statements(connection) == before + 1


def claim_statements(conn) -> list[tuple[str, int, int]]:
    """The claims prepared on ``conn``'s session: (statement, generic plans, custom plans)."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%SKIP LOCKED%%'"
        )
        return cursor.fetchall()


def test_the_workers_claim_is_prepared_and_planned_at_every_run():
    """The claim of a worker (alone, when it has nothing to acknowledge, such as one woken by a
    notification; or carrying acknowledgements) is parsed once per connection and planned with
    each run's values: never a generic plan, however many runs (PostgreSQL would consider one
    after five)."""
    for _ in range(12):
        demo.noop.enqueue()
        _, held = operations.complete(connection, claim=claims("w", prepared=True).take(5))
        assert len(held) == 1
        operations.complete(connection, held)
    ((statement, generic, custom),) = claim_statements(connection)
    assert "UPDATE pgjobs_job" in statement and "completed" not in statement
    assert generic == 0 and custom == 12
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_custom_plan"
    # carrying acknowledgements, the combined statement is prepared and planned at each run too
    for _ in range(7):
        demo.noop.enqueue_many([() for _ in range(2)])
        _, held = claim(1)
        completed, more = operations.complete(
            connection, held, claim=claims("w", prepared=True).take(5)
        )
        assert completed == {held[0].id} and len(more) == 1
        operations.complete(connection, more)
    combined = [row for row in claim_statements(connection) if "completed" in row[0]]
    assert [(generic, custom) for _, generic, custom in combined] == [(0, 7)]


def test_a_new_connection_plans_the_prepared_claim_at_every_run_again():
    operations.complete(connection, claim=claims("w", prepared=True).take(5))
    connection.close()  # the worker reconnects after a fault: a new session
    for _ in range(7):
        operations.complete(connection, claim=claims("w", prepared=True).take(5))
    ((_, generic, custom),) = claim_statements(connection)
    assert (generic, custom) == (0, 7)


def test_the_claim_is_not_prepared_when_prepared_statements_are_off(settings):
    settings.PGJOBS = {**settings.PGJOBS, "PREPARED_STATEMENTS": False}
    connection.close()
    demo.noop.enqueue()
    _, held = operations.complete(connection, claim=claims("w", prepared=True).take(5))
    assert len(held) == 1 and claim_statements(connection) == []


@pytest.mark.parametrize("listen", [True, False])
def test_a_listening_worker_prepares_its_claim_and_a_polling_one_does_not(monkeypatch, listen):
    """A worker that may LISTEN has a session that keeps its settings; one told not to listen
    may be behind PgBouncer in transaction mode, where the claim stays unprepared."""
    asked = []
    original = operations.complete

    def spying(*args, **kwargs):
        if kwargs.get("claim") is not None:
            asked.append(kwargs["claim"].prepared)
        return original(*args, **kwargs)

    monkeypatch.setattr(operations, "complete", spying)
    demo.noop.enqueue_many([() for _ in range(3)])
    worker = run_worker(concurrency=2, listen=listen)
    assert worker.stats.succeeded == 3
    assert asked and set(asked) == {listen}


def test_prepared_statements_can_be_turned_off(settings):
    settings.PGJOBS = {**settings.PGJOBS, "PREPARED_STATEMENTS": False}
    connection.close()
    demo.noop.enqueue()
    demo.noop.enqueue_many([() for _ in range(2)])
    assert prepared_statements(connection) == 0


def test_prepared_path_joins_the_callers_transaction_and_rolls_back_with_it():
    before = prepared_statements(connection)
    with pytest.raises(RuntimeError), transaction.atomic():
        demo.noop.enqueue()
        demo.noop.enqueue_many([() for _ in range(2)])
        assert prepared_statements(connection) == before + 2  # both went the prepared way
        assert Job.objects.count() == 3
        raise RuntimeError("roll back")
    assert not Job.objects.exists()


def test_prepared_path_raises_django_errors_and_respects_broken_transactions():
    bad = {"id": 1, "token": "not-a-uuid", "delay_seconds": 1, "error": "[]"}
    with transaction.atomic():
        with pytest.raises(DatabaseError), transaction.atomic(savepoint=False):
            db.execute_prepared(connection, "retry_job", bad)  # django.db's error, not psycopg's
        # Like Django's own cursor: no statement runs in a transaction known to be broken.
        with pytest.raises(transaction.TransactionManagementError):
            claim(1)
    claim(1)  # and the connection is usable afterwards


def test_sigkilled_worker_with_unsent_acknowledgements_loses_nothing(
    start_worker, other_connection
):
    """The acknowledgements of finished jobs are held back (their rows are locked by another
    transaction) when the worker is SIGKILLed: plain jobs run again, atomic jobs' effects
    happen exactly once, nothing is lost."""
    plain = [f"plain-{i}" for i in range(4)]
    atomic = [f"atomic-{i}" for i in range(4)]
    demo.record.enqueue_many([((label,), {"sleep": 0.5}) for label in plain])
    demo.record_atomic.enqueue_many([((label,), {"sleep": 0.5}) for label in atomic])
    victim = start_worker("--concurrency", "8", "--batch-size", "8", env=FAST_LEASES)
    wait_until(lambda: Job.objects.filter(status="running").count() == 8, timeout=30)
    # Hold every claimed row: the worker's acknowledgements (and the atomic jobs' own
    # completions) now wait for this transaction.
    blocker = other_connection
    blocker.execute("BEGIN")
    blocker.execute("SELECT id FROM pgjobs_job WHERE status = 'running' FOR UPDATE")
    wait_until(lambda: executions_by_label().keys() >= set(plain), timeout=30)
    time.sleep(0.5)  # the atomic jobs reach their completion and wait on the lock too
    assert not Execution.objects.filter(label__in=atomic).exists()  # not committed
    victim.kill()
    # A killed client's backends would still commit once the lock is gone: end them, as the
    # server does when it notices the dead peer.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        ours = cursor.fetchone()[0]
    blocker.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)",
        (ours,),
    )
    blocker.execute("ROLLBACK")
    assert Job.objects.count() == 8  # nothing was acknowledged, nothing is lost
    survivor = start_worker("--concurrency", "8", env=FAST_LEASES)
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()
    tally = executions_by_label()
    assert all(tally[label] == 2 for label in plain), tally  # at least once: ran again
    assert all(tally[label] == 1 for label in atomic), tally  # exactly once
    assert dict(Counter.objects.values_list("name", "value")) == dict.fromkeys(atomic, 1)
    assert not DeadLetter.objects.exists()


def victims_claims(conn, worker: WorkerProcess) -> set[tuple[int, int]]:
    """The claims (job id, attempt) a worker holds: claimed and not acknowledged."""
    return set(
        conn.execute(
            "SELECT id, attempts FROM pgjobs_job WHERE status = 'running' AND worker LIKE %s",
            (f"%:{worker.pid}:%",),
        ).fetchall()
    )


def statements_under_way(conn, app_name: str) -> int:
    """Statements of one process's backends that may still commit: running, not waiting for a
    lock nor for the (stopped) client to read their result."""
    return count(
        conn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND state = 'active' "
        "AND wait_event_type IS DISTINCT FROM 'Lock' AND wait_event_type IS DISTINCT FROM 'Client'",
        app_name,
    )


def test_sigkill_mid_drain_with_big_batches_loses_nothing(start_worker, other_connection):
    """A worker with batches of 100 is SIGKILLed mid-drain while acknowledgements of finished
    plain jobs are pending: exactly those jobs run again (at least once), atomic jobs run
    exactly once, nothing is lost."""
    labels = [f"drain-{i}" for i in range(2400)]
    half = len(labels) // 2
    plain = demo.record.enqueue_many([((label,), {"sleep": 0.002}) for label in labels[:half]])
    plain_ids = {job.pk for job in plain}
    demo.record_atomic.enqueue_many([((label,), {"sleep": 0.002}) for label in labels[half:]])
    options = ("--concurrency", "8", "--batch-size", "100", "--prefetch", "100")
    # Leases long enough that stopping and resuming the living victim below (up to a few seconds
    # on a loaded machine) never lets the other worker rescue one of its jobs: every re-run must
    # come from the kill.
    leases = {**FAST_LEASES, "PGJOBS_LEASE_SECONDS": "8", "PGJOBS_HEARTBEAT_SECONDS": "1"}
    victim = start_worker(*options, env={**leases, "PGAPPNAME": "pgjobs-victim"})
    other = start_worker(*options, env=leases)
    wait_until(lambda: Execution.objects.count() > 300, timeout=60)
    # the victim is working (on a loaded machine it can still be starting up here)
    wait_until(lambda: victims_claims(other_connection, victim), timeout=60, interval=0.01)
    # Stop the victim at a moment it holds finished jobs whose acknowledgement it has not sent:
    # stopped (SIGSTOP) and its statements under way finished, what the table says it holds is
    # what it holds when it dies, and a held job that has its Execution row ran unacknowledged.
    for _ in range(150):  # until the victim is caught with one; on a loaded machine it takes more
        victim.signal(signal.SIGSTOP)
        # a statement written to the socket just before the stop shows as idle until its backend
        # reads it: give the backends a moment to pick up what was sent, then wait for them
        time.sleep(0.1)
        wait_until(lambda: not statements_under_way(other_connection, "pgjobs-victim"), 10, 0.01)
        held = victims_claims(other_connection, victim)
        ran = set(
            Execution.objects.filter(job_id__in=[job_id for job_id, _ in held]).values_list(
                "job_id", "attempt"
            )
        )
        pending = held & ran
        if pending:
            break
        victim.signal(signal.SIGCONT)
        time.sleep(0.02)
    assert pending, "the victim never had an acknowledgement pending"
    assert count(other_connection, BACKENDS, "pgjobs-victim"), "PGAPPNAME not in effect"
    assert {job_id for job_id, _ in pending} <= plain_ids  # atomic jobs acknowledge themselves
    victim.kill()
    wait_until(lambda: not count(other_connection, BACKENDS, "pgjobs-victim"), timeout=30)
    held |= victims_claims(other_connection, victim)  # a statement stuck on a lock, committed
    wait_until(lambda: not Job.objects.exists(), timeout=120)
    other.signal(signal.SIGTERM)
    assert other.wait(30) == 0, other.output()
    tally = executions_by_label()
    assert set(tally) == set(labels), "a job was lost"
    assert all(tally[label] == 1 for label in labels[half:]), "an atomic job ran twice"
    assert sum(Counter.objects.values_list("value", flat=True)) == len(labels) - half
    assert not DeadLetter.objects.exists()
    runs: dict[int, list[int]] = {}
    for job_id, attempt in Execution.objects.filter(job_id__in=plain_ids).values_list(
        "job_id", "attempt"
    ):
        runs.setdefault(job_id, []).append(attempt)
    again = {job_id: sorted(attempts) for job_id, attempts in runs.items() if len(attempts) > 1}
    # the pending acknowledgements were lost with the victim, which ran nothing once stopped:
    # exactly those jobs ran again
    assert again.keys() == {job_id for job_id, _ in pending}, (pending, again)
    # once, and their first run was a claim of the victim's
    assert all(
        len(attempts) == 2 and (job_id, attempts[0]) in held for job_id, attempts in again.items()
    ), (again, held)
    assert len(again) <= len(held)
    connections.close_all()


def test_producers_coalesce_notifications_outside_transactions(other_connection, monkeypatch):
    from django_pgjobs import wakeups

    monkeypatch.setattr(wakeups, "NOTIFY_COALESCE_SECONDS", 60)
    monkeypatch.setattr(wakeups, "_last_notified", {})
    other_connection.execute("LISTEN pgjobs")
    demo.record.enqueue("a")
    demo.record.enqueue("b")  # within the window: no second notification
    demo.record.using(queue="other").enqueue("c")  # another queue: its own notification
    payloads = [n.payload for n in other_connection.notifies(timeout=0.5)]
    assert payloads == ["default", "other"]


def test_transactions_notify_after_their_commit_coalesced_and_never_for_a_rollback(
    other_connection, monkeypatch
):
    """Inside transaction.atomic() the wake-up is sent after the commit, by the same rule as
    in autocommit, counted from notifications really delivered: a rolled-back transaction sent
    none, so the next commit still wakes the workers."""
    from django_pgjobs import wakeups

    monkeypatch.setattr(wakeups, "NOTIFY_COALESCE_SECONDS", 60)
    monkeypatch.setattr(wakeups, "_last_notified", {})
    other_connection.execute("LISTEN pgjobs")
    with pytest.raises(RuntimeError), transaction.atomic():
        demo.record.enqueue("rolled back")
        raise RuntimeError("rollback")
    with transaction.atomic():
        demo.record.enqueue("first commit")
        demo.record.enqueue("same transaction")
        with transaction.atomic():  # a savepoint: part of the same commit
            demo.record.using(queue="other").enqueue("its own queue")
        with pytest.raises(RuntimeError), transaction.atomic():
            demo.record.using(queue="gone").enqueue("savepoint rolled back")
            raise RuntimeError("rollback to savepoint")
        demo.record.using(queue="later", delay=3600).enqueue("not due: no notification")
        assert list(other_connection.notifies(timeout=0.3)) == []  # nothing before the commit
    with transaction.atomic():
        demo.record.enqueue("second commit")  # within the window of the first: coalesced
    payloads = [n.payload for n in other_connection.notifies(timeout=0.5)]
    assert payloads == ["default", "other"]
    assert Job.objects.count() == 5


def test_manual_transactions_notify_with_the_insert(other_connection, monkeypatch):
    """Without transaction.atomic() no on_commit callback runs at the commit, which may come
    long after: the INSERT carries its notification, whatever was sent before."""
    from django_pgjobs import wakeups

    monkeypatch.setattr(wakeups, "NOTIFY_COALESCE_SECONDS", 60)
    monkeypatch.setattr(wakeups, "_last_notified", {})
    other_connection.execute("LISTEN pgjobs")
    demo.record.enqueue("autocommit")
    transaction.set_autocommit(False)
    try:
        demo.record.enqueue("manual")
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    payloads = [n.payload for n in other_connection.notifies(timeout=0.5)]
    assert payloads == ["default", "default"]


def test_a_woken_worker_looks_again_for_jobs_whose_notification_was_skipped(monkeypatch):
    import threading

    from django_pgjobs import wakeups
    from django_pgjobs.worker import Worker

    monkeypatch.setattr(wakeups, "NOTIFY_COALESCE_SECONDS", 60)
    monkeypatch.setattr(wakeups, "_last_notified", {})
    worker = Worker(listen=True, poll_interval=30, install_signal_handlers=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(1.0)  # listening, first poll done; the next one is 30 s away
        started = time.monotonic()
        demo.record.enqueue("notified")
        demo.record.enqueue("skipped")  # no notification of its own
        wait_until(lambda: Execution.objects.count() == 2, timeout=10)
        assert time.monotonic() - started < 5  # the echo claim found it, not the 30 s poll
    finally:
        worker.request_stop()
        thread.join(30)
    assert not Job.objects.exists()


def test_jobs_committed_inside_transactions_start_promptly_on_an_idle_worker(
    start_worker, other_connection
):
    """A real runjobs process whose next poll is 30 s away: every job committed inside
    transaction.atomic() must be started by a wake-up, including right after a transaction that
    would have notified rolled back, in a burst of commits closer together than the coalescing
    window, and in a transaction that commits long after its enqueue."""
    worker = start_worker("--poll-interval", "30")
    listening = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query = 'LISTEN pgjobs'"
    )
    wait_until(lambda: count(other_connection, listening) == 1, timeout=60)
    time.sleep(1.0)  # its first poll is done; the next one is 30 s away
    committed: dict[str, float] = {}

    def enqueue_in_transaction(label: str, hold: float = 0.0) -> None:
        with transaction.atomic():
            demo.record.enqueue(label)
            time.sleep(hold)
            committed[label] = time.time()  # the commit follows at once

    def wait_for(labels) -> None:
        wait_until(lambda: Execution.objects.filter(label__in=labels).count() == len(labels), 10)

    with pytest.raises(RuntimeError), transaction.atomic():
        demo.record.enqueue("rolled back")
        raise RuntimeError("rollback")
    enqueue_in_transaction("after a rollback")
    wait_for(["after a rollback"])
    burst = [f"burst {i}" for i in range(20)]
    for label in burst:
        enqueue_in_transaction(label)
    wait_for(burst)
    demo.record.enqueue("autocommit, notified")
    enqueue_in_transaction("long transaction", hold=0.3)
    wait_for(["autocommit, notified", "long transaction"])

    started = {e.label: e.at.timestamp() for e in Execution.objects.filter(label__in=committed)}
    latency = {label: started[label] - committed[label] for label in committed}
    assert max(latency.values()) < 1.0, latency  # a wake-up, not the 30 s poll (here: 3-21 ms)
    assert not Execution.objects.filter(label="rolled back").exists()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
