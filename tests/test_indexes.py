"""Every index the models declare is used: EXPLAIN of the named statements (and of the admin's
list queries) on a realistic table walks it. An index nothing uses costs every write and should
go; this test names the statements each one serves (docs/reference/database.md)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection, models
from django.utils import timezone

from django_pgjobs import operations, sql
from django_pgjobs.models import DeadLetter, FlowKey, Job, QueueStat

pytestmark = pytest.mark.django_db(transaction=True)

#: Who each declared index is for; each must show up in the plan of at least these.
EXPECTED_USERS = {
    "pgjobs_job_claim_idx": {"claim_jobs", "complete_and_claim_jobs", "queue_heads"},
    # flow control (claim_jobs_flow): a key's ready jobs in FIFO order and its running ones,
    # the due keys least recently served first, the earliest key due later
    "pgjobs_job_flow_ready_idx": {"claim_jobs_flow"},
    "pgjobs_job_flow_running_idx": {"claim_jobs_flow"},
    "pgjobs_flow_key_served_idx": {"claim_jobs_flow"},
    "pgjobs_flow_key_ready_idx": {"claim_jobs_flow"},
    # and the running half of the queue lists (pgjobs_job_queue_idx leaves running rows out)
    "pgjobs_job_lease_idx": {
        "rescue_expired",
        "running_jobs_by_queue",
        "job_queue_names",
        "admin: jobs of one queue",
    },
    "pgjobs_job_finished_idx": {"prune_succeeded"},
    "pgjobs_job_queue_idx": {
        "job_queue_names",
        "admin: jobs of one queue",
        "due_jobs_in_queue",
        "scheduled_jobs_in_queue",
    },
    "pgjobs_job_retrying_idx": {"retrying_jobs_in_queue"},
    "pgjobs_job_unique_key_in_flight": {
        "find_in_flight_by_unique_key",
        "enqueue_job",
        "enqueue_job_debounced",
        "enqueue_job_throttled",
    },
    "pgjobs_job_waiting_key": {
        "find_waiting_by_unique_key",
        "enqueue_job_waiting",
        "enqueue_job_waiting_debounced",
        "enqueue_job_waiting_throttled",
    },
    # the release of a workflow's next step and the cancel of its later ones, in the statements
    # that complete or dead-letter its jobs (empty for jobs outside a workflow)
    "pgjobs_job_workflow_idx": {
        "complete_workflow_jobs",
        "complete_workflow_jobs_with_results",
        "dead_letter_job",
        "rescue_expired",
        "requeue_dead_letters",
        "abort_workflow",
        "workflow_previous_results",
        "workflow_running_jobs",
        "prune_workflows",
        "cancel_jobs",
        "abort_jobs",
    },
    "pgjobs_dl_failed_idx": {"admin: dead letters", "prune_dead_letters"},
    "pgjobs_dl_type_idx": {"dead_letter_error_types"},
    "pgjobs_dl_name_idx": {"dead_letter_names", "prune_dead_letters"},
    "pgjobs_dl_queue_idx": {"dead_letters_by_queue", "job_queue_names"},
    "pgjobs_dl_job_idx": {"find_job_result"},
    # a workflow's dead-lettered steps: its resume waits for the last, its prune for none left
    "pgjobs_dl_workflow_idx": {
        "requeue_dead_letters",
        "requeue_edited_dead_letter",
        "prune_workflows",
    },
    "pgjobs_stat_minute_idx": {"prune_queue_stats", "queue_stats_since"},
    "pgjobs_stat_queue_minute": {"record_queue_stats"},
}


def params_for(name: str) -> dict:
    now = timezone.now()
    params = {
        "ids": [1, 2, 3],
        "tokens": [uuid.uuid4()] * 3,
        "limit": 50,
        "worker": "w",
        "all_queues": False,
        "any_name": True,
        "any_id": True,
        "only_ids": [],
        "skip_names": [],
        "queues": ["q3", "q7"],
        "lease_seconds": 60.0,
        "token": uuid.uuid4(),
        "id": 5,
        "reason": "r",
        "error_type": "E",
        "error": "[]",
        "delay_seconds": 1.0,
        "delay": 5.0,
        "grace_seconds": 600.0,
        "keep_seconds": 2 * 24 * 3600.0,
        "keep_results_seconds": 7 * 24 * 3600.0,
        "keep_result": False,
        "progress": None,
        "metadata": None,
        "task_backend": "",
        "trace_context_json": None,
        "job_names": ["j1", "j2"],
        "cron_jobs": ["j1"],
        "results": ["null"] * 3,
        "name": "q3",
        "paused": True,
        "unique_key": "k-13",
        "waiting_key": None,
        "replace_args": True,
        "move_run_after": True,
        "throttle_key": "k-13",
        "throttle": 10.0,
        "running_id": None,
        "running_token": None,
        "now": None,
        "schedule_id": 1,
        "fire_time": now,
        "next_fire": now,
        "changed_at": now,
        "manual": False,
        "expected": now,
        "catch_up": 0,
        "cron": "* * * * *",
        "time_zone": "UTC",
        "topic": "t",
        "payload": "{}",
        "headers": "{}",
        "key": "k",
        "lease": 30.0,
        "consumer": "c",
        "event_id": 1,
        "concurrency": 1,
        "hostname": "h",
        "pid": 1,
        "alive_seconds": 60.0,
        "forget_seconds": 3600.0,
        "queue": "q3",
        "cap": 10_001,
        "since": now - timedelta(minutes=59),
        "args": "[]",
        "kwargs": "{}",
        "priority": 0,
        "run_after": None,
        "max_attempts": 5,
        "timeout": None,
        "notify": True,
        "unique_keys": [None],
        "succeeded": [1],
        "retried": [0],
        "dead_lettered": [0],
        "waits": ["{1}"],
        "pids": [0],
        "requested_by": "admin user 'root'",
        "cancel_waiting": True,
        "summary": "E: boom",
        "sync_room": 40,
        "sync_starts": 4,
        "async_room": 10,
        "async_starts": 10,
        "async_names": ["app.jobs.j7"],
        "ago": [0.0] * 3,
        "version": 1,
        "spacing": 0.02,
        "previous_due": None,
        "action": "requeue",
        "by": "admin user 'root'",
        "new_key": True,
        "edited_key": "k-8",
        "max_age": 7 * 24 * 3600.0,
        "max_per_name": 1000,
        "flow_key": "key:k-7",
        "concurrency_limit": 1,
        "rate": None,
        "burst": None,
        "lanes": 108,
        "idle_seconds": 86400.0,
        "flow_keys": ["key:k-7"],
        "flow_limits": [2],
        "flow_rates": [None],
        "flow_bursts": [None],
        "keep_workflows_seconds": 7 * 24 * 3600.0,
    }
    if name == "enqueue_jobs":
        params.update(args=["[]"], kwargs=["{}"])
    if name == "enqueue_workflow":
        one = {"names": ["j"], "queues": ["q3"], "priorities": [0], "args": ["[]"]}
        params.update(one, kwargs=["{}"], run_afters=[None], max_attempts=[5], timeouts=[None])
        params.update(keep_results=[False], task_backends=[""], versions=[1])
        params.update(steps=[0], members=[0])
        params.update(workflow_name="j", sizes="[1]", first_size=1, groups="[]")
    if name == "extend_leases":
        params["lease_seconds"] = [60.0] * 3
    return params


def seed_a_busy_installation() -> None:
    """A million jobs in 20 queues (ready, scheduled, retrying, running, retained successful),
    200,000 dead letters over two weeks, two days of per-minute statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after,
                                    attempts, max_attempts, unique_key, created_at, worker,
                                    errors, lease_expires_at, finished_at, claim_token)
            SELECT 'app.jobs.j' || (i % 40), 'q' || (i % 20), (i % 5) - 2, '[1]', '{}',
                   CASE WHEN i % 100 = 0 THEN 'running' WHEN i % 4 = 0 THEN 'successful'
                        ELSE 'ready' END,
                   now() + ((i % 7) - 3) * interval '1 hour',
                   CASE WHEN i % 50 = 1 THEN 2 WHEN i % 100 = 0 THEN 1 ELSE 0 END, 5,
                   CASE WHEN i % 10 = 3 THEN 'k-' || i END, now(), '', '[]',
                   CASE WHEN i % 100 = 0 THEN now() + interval '1 minute' END,
                   CASE WHEN i % 4 = 0 AND i % 100 <> 0 THEN now() - interval '1 hour' END,
                   CASE WHEN i % 100 = 0 THEN gen_random_uuid() END
            FROM generate_series(1, 1000000) AS i
            """
        )
        cursor.execute(
            """
            INSERT INTO pgjobs_deadletter (job_id, name, queue, priority, args, kwargs, attempts,
                                           max_attempts, reason, error_type, errors, created_at,
                                           started_at, failed_at)
            SELECT i, 'app.jobs.j' || (i % 40), 'q' || (i % 20), 0, '[]', '{}', 5, 5, 'boom',
                   'E' || (i % 12), '[]', now(), now(), now() - (i % 20000) * interval '1 minute'
            FROM generate_series(1, 200000) AS i
            """
        )
        cursor.execute(
            """
            INSERT INTO pgjobs_stat (queue, minute, succeeded, retried, dead_lettered, wait_buckets)
            SELECT 'q' || q, date_trunc('minute', now()) - m * interval '1 minute', 1, 0, 0, '{1}'
            FROM generate_series(0, 19) AS q, generate_series(0, 2879) AS m
            """
        )
        # flow control: 2,000 keys, some due, with 20,000 jobs (ready, running)
        cursor.execute(
            """
            INSERT INTO pgjobs_flow_key (key, concurrency_limit, tokens, ready_at, last_served_at)
            SELECT 'key:k-' || i, 1, 0,
                   CASE WHEN i % 3 = 0 THEN now() - interval '1 minute'
                        WHEN i % 3 = 1 THEN now() + interval '1 minute' END,
                   now() - i * interval '1 second'
            FROM generate_series(1, 2000) AS i
            """
        )
        cursor.execute(
            """
            INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after,
                                    attempts, max_attempts, created_at, worker, errors, flow_key)
            SELECT 'app.jobs.j1', 'q3', 0, '[1]', '{}',
                   CASE WHEN i % 10 = 0 THEN 'running' ELSE 'ready' END, now(), 0, 5, now(),
                   '', '[]', 'key:k-' || (i % 2000)
            FROM generate_series(1, 20000) AS i
            """
        )
        cursor.execute("ANALYZE pgjobs_flow_key")
        cursor.execute("ANALYZE pgjobs_job")
        cursor.execute("ANALYZE pgjobs_deadletter")
        cursor.execute("ANALYZE pgjobs_stat")


def plans() -> dict[str, str]:
    """The plan of every named statement that touches the jobs tables, and of the admin's list
    queries, by name."""
    found = {}
    with connection.cursor() as cursor:
        for name, text in sql.QUERIES.items():
            if "pgjobs_worker" in text:
                continue  # the worker registry: a handful of rows, by primary key
            cursor.execute("EXPLAIN " + text, params_for(name))
            found[name] = "\n".join(row[0] for row in cursor.fetchall())
    order = ("-priority", "run_after", "id")
    found["admin: jobs of one queue"] = Job.objects.in_queue("q3").order_by(*order)[:50].explain()
    found["admin: dead letters"] = DeadLetter.objects.order_by("-failed_at", "-id")[:50].explain()
    return found


def test_every_declared_index_is_used_by_the_statements_it_is_for():
    seed_a_busy_installation()
    by_statement = plans()
    declared = {
        index.name
        for model in (Job, DeadLetter, QueueStat, FlowKey)
        for index in [*model._meta.indexes, *model._meta.constraints]
        if isinstance(index, (models.Index, models.UniqueConstraint))
    }
    assert declared == set(EXPECTED_USERS), "declare who a new index is for"
    for index, expected in EXPECTED_USERS.items():
        users = {name for name, plan in by_statement.items() if re.search(rf"\b{index}\b", plan)}
        assert expected <= users, (index, users)

    # A worker's statements about the jobs it holds (200 of the 10,000 running) find them by
    # their key. Written plainly, each read every running job of every worker through the lease
    # index and hashed them to find its own (the acknowledgement of 200 jobs: 10,410 buffers and
    # 14 ms; by key 1,200 and 0.8 ms; docs/benchmarks.md#beside-every-workers-running-jobs).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, claim_token FROM pgjobs_job WHERE status = 'running' "
            "AND flow_key IS NULL ORDER BY id LIMIT 200"
        )
        ids, tokens = (list(column) for column in zip(*cursor.fetchall(), strict=True))
        held = {"ids": ids, "tokens": tokens, "ago": [0.0] * 200, "results": ["null"] * 200}
        for name in HELD_JOB_STATEMENTS:
            params = params_for(name) | held
            if name == "extend_leases":
                params["lease_seconds"] = [60.0] * 200
            cursor.execute("EXPLAIN " + sql.query(name), params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "pgjobs_job_lease_idx" not in plan and "pgjobs_job_pkey" in plan, (name, plan)


#: The statements that find the jobs a worker holds (ids and claim tokens) among the running.
HELD_JOB_STATEMENTS = (
    "extend_leases",
    "mark_started",
    "complete_jobs",
    "complete_jobs_retained",
    "complete_jobs_with_results",
    "complete_and_claim_jobs",
    "complete_retained_and_claim_jobs",
    "complete_with_results_and_claim_jobs",
    "complete_workflow_jobs",
)


def indexes_holding(job_id: int) -> set[str]:
    """The indexes of pgjobs_job whose predicate the row ``job_id`` matches: those an INSERT or a
    non-HOT UPDATE writing this row version adds an entry to."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indrelid = 'pgjobs_job'::regclass"
        )
        found = set()
        for index, predicate in cursor.fetchall():
            # the predicate is the catalog's own text, not input
            cursor.execute(
                f"SELECT EXISTS (SELECT FROM pgjobs_job WHERE id = %s AND ({predicate or 'true'}))",
                [job_id],
            )
            if cursor.fetchone()[0]:
                found.add(index)
        return found


def test_enqueue_writes_three_index_entries_and_the_claim_two():
    """A job without a unique key or workflow: the enqueue writes the primary key, the claim
    index and the queue index; the claim (not HOT: it changes ``status``) writes only the
    primary key and the lease index, the entries no claim can do without."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("enqueue_job"), params_for("enqueue_job") | {"unique_key": None})
        job_id = cursor.fetchone()[0]
    assert indexes_holding(job_id) == {
        "pgjobs_job_pkey",
        "pgjobs_job_claim_idx",
        "pgjobs_job_queue_idx",
    }
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    claimed = operations.complete(connection, claim=claims.take(10)).claimed
    assert [job.id for job in claimed] == [job_id]
    assert indexes_holding(job_id) == {"pgjobs_job_pkey", "pgjobs_job_lease_idx"}
