"""Measurements of django-pgjobs' own statements from psycopg alone (no Django, no worker).

``raw_limit``   jobs/s of the claim and acknowledge statements run back to back on one
                connection: one job per claim (claim_jobs + complete_jobs, two statements per
                job) and batches of 50 (complete_and_claim_jobs, one statement per batch); and
                the commit wall of enqueue: a bare one-row INSERT per transaction.
``notify_cost`` jobs/s of 8 threads, each inserting one job per explicit transaction, by how
                the workers are woken: no notification, ``pg_notify`` inside every transaction,
                ``notify_queue`` after every commit, and ``notify_queue`` after a commit unless
                that thread notified less than 10 ms before (what enqueue does inside
                ``transaction.atomic()``). The database's side alone: no Django, no Python per
                job beyond psycopg.
``latency_floor`` enqueue -> start of the least a durable PostgreSQL queue can do, with the
                latency measurement's jobs and pauses: a producer process inserts a job
                and notifies in one autocommit statement; a consumer process, in LISTEN,
                claims it (FOR UPDATE SKIP LOCKED, synchronous commit) on the same connection
                as soon as the notification arrives. One thread each, no Django; also the
                notification alone. What no queue on this machine can beat.
``claim_cost``  time of one claim statement (batch of 10, acknowledgements folded in) with 10k
                and with millions of rows of history (retained successful jobs) and scheduled
                jobs in pgjobs_job. The table is filled once per size; the timing is repeated.

Both take ``repeat`` and report the median of the repetitions of each figure, with the
repetitions under ``samples``.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
import uuid

import psycopg

from bench.drivers.common import gaps, percentile


def queries() -> dict[str, str]:
    """The project's statements as the worker runs them (parts included: ``django_pgjobs.sql``)."""
    from django_pgjobs.sql import QUERIES

    return dict(QUERIES)


INSERT_READY = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'ready', now() - interval '1 second', 0, 5, now(),
       '', '[]'
FROM generate_series(1, %s)
"""

# One job row, as enqueue writes it, without the RETURNING and the notification.
INSERT_ONE = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors)
VALUES ('bench.noop', 'default', 0, '[]', '{}', 'ready', now(), 0, 5, now(), '', '[]')
"""

# Half history (successful jobs kept by retention), half scheduled for tomorrow.
INSERT_HISTORY = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, started_at, finished_at, worker, errors)
SELECT 'bench.noop', 'default', 0, '[1, "history"]', '{}',
       CASE WHEN i %% 2 = 0 THEN 'successful' ELSE 'ready' END,
       CASE WHEN i %% 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END,
       CASE WHEN i %% 2 = 0 THEN 1 ELSE 0 END, 5, now(),
       CASE WHEN i %% 2 = 0 THEN now() END, CASE WHEN i %% 2 = 0 THEN now() END, '', '[]'
FROM generate_series(1, %s) AS i
"""


def _claim_only(limit: int) -> dict:
    """The claim's own parameters, as a worker with ``limit`` free executors passes them (every
    job started at once; no async jobs)."""
    return {
        "limit": limit,
        "sync_room": limit,
        "sync_starts": limit,
        "async_room": 0,
        "async_starts": 0,
        "async_names": [],
        "worker": "bench",
        "all_queues": True,
        "any_name": True,
        "any_id": True,
        "only_ids": [],
        "skip_names": [],
        "queues": [],
        "lease_seconds": 60.0,
        "token": uuid.uuid4(),
    }


def _claim_params(done: list[int], token, limit: int) -> dict:
    """Acknowledge ``done`` (claimed under ``token``, the one the caller chose; the statements
    need not return it) and claim up to ``limit`` under a fresh token."""
    return {"ids": done, "tokens": [token] * len(done), **_claim_only(limit)}


def _drain_batched(conn, sql: str, limit: int, stop_after: int | None = None) -> tuple:
    """Claim + acknowledge in batches until nothing is left; returns (jobs, seconds, times)."""
    done: list[int] = []
    token = None
    jobs = 0
    times = []
    start = time.perf_counter()
    while True:
        params = _claim_params(done, token, limit)
        t0 = time.perf_counter()
        rows = conn.execute(sql, params, prepare=True).fetchall()
        times.append(time.perf_counter() - t0)
        done, token = [row[0] for row in rows if row[0] is not None], params["token"]
        jobs += len(done)
        if not done or (stop_after and len(times) >= stop_after):
            if done:
                conn.execute(sql, _claim_params(done, token, 0), prepare=True)
            break
    return jobs, time.perf_counter() - start, times


def medians(samples: list[dict]) -> dict:
    """Each figure's median over the repetitions, and the repetitions themselves."""
    return {
        **{key: statistics.median(sample[key] for sample in samples) for key in samples[0]},
        "samples": samples,
    }


def raw_limit(url: str, quick: bool, repeat: int = 1) -> dict:
    q = queries()
    with psycopg.connect(url, autocommit=True) as conn:
        return medians([_raw_limit_once(conn, q, quick) for _ in range(repeat)])


def _raw_limit_once(conn, q: dict[str, str], quick: bool) -> dict:
    results = {}
    conn.execute("TRUNCATE pgjobs_job")
    n = 1000 if quick else 4000
    conn.execute(INSERT_READY, (n,))
    conn.execute("VACUUM ANALYZE pgjobs_job")
    start = time.perf_counter()
    count = 0
    while True:
        params = _claim_only(1)
        token = params["token"]
        rows = conn.execute(q["claim_jobs"], params, prepare=True).fetchall()
        if not rows:
            break
        conn.execute(
            q["complete_jobs"],
            {"ids": [r[0] for r in rows], "tokens": [token] * len(rows)},
            prepare=True,
        )
        count += len(rows)
    results["batch_1_jobs_per_s"] = count / (time.perf_counter() - start)

    n = 10_000 if quick else 40_000
    conn.execute(INSERT_READY, (n,))
    conn.execute("VACUUM ANALYZE pgjobs_job")
    jobs, seconds, _ = _drain_batched(conn, q["complete_and_claim_jobs"], 50)
    results["batch_50_jobs_per_s"] = jobs / seconds

    # The commit wall of one-job-per-transaction enqueue: a bare INSERT of one job row per
    # transaction (autocommit, prepared), no RETURNING, no notification, no Python around it.
    n = 500 if quick else 2000
    start = time.perf_counter()
    for _ in range(n):
        conn.execute(INSERT_ONE, prepare=True)
    results["insert_1_per_tx_per_s"] = n / (time.perf_counter() - start)
    conn.execute("TRUNCATE pgjobs_job")
    return results


def notify_cost(url: str, quick: bool, repeat: int = 1) -> dict:
    notify_after = queries()["notify_queue"]
    coalesce = 0.01  # wakeups.NOTIFY_COALESCE_SECONDS

    def off(conn, state):
        with conn.transaction():
            conn.execute(INSERT_ONE, prepare=True)

    def in_transaction(conn, state):
        with conn.transaction():
            conn.execute(INSERT_ONE, prepare=True)
            conn.execute("SELECT pg_notify('pgjobs', 'default')", prepare=True)

    def after_every_commit(conn, state):
        off(conn, state)
        conn.execute(notify_after, {"queue": "default"}, prepare=True)

    def after_commit_coalesced(conn, state):
        off(conn, state)
        if time.monotonic() - state.get("last", float("-inf")) >= coalesce:
            conn.execute(notify_after, {"queue": "default"}, prepare=True)
            state["last"] = time.monotonic()

    modes = {
        "off": off,
        "in_transaction": in_transaction,
        "after_every_commit": after_every_commit,
        "after_commit_coalesced": after_commit_coalesced,
    }
    per = 150 if quick else 600
    samples = []
    for _ in range(repeat):  # every mode once per repetition, under the load of the moment
        samples.append({name: _producers(url, 8, per, body) for name, body in modes.items()})
    return medians(samples)


def _producers(url: str, threads: int, per: int, body) -> float:
    """Jobs/s of ``threads`` connections running ``body`` ``per`` times each, started at once."""
    conns = [psycopg.connect(url, autocommit=True) for _ in range(threads)]
    go = threading.Barrier(threads + 1)

    def produce(conn) -> None:
        state: dict = {}
        go.wait()
        for _ in range(per):
            body(conn, state)

    workers = [threading.Thread(target=produce, args=(conn,)) for conn in conns]
    for worker in workers:
        worker.start()
    go.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    conns[0].execute("TRUNCATE pgjobs_job")
    for conn in conns:
        conn.close()
    return threads * per / elapsed


def _claim_latency(conn, sql: str) -> dict:
    conn.execute(INSERT_READY, (3000,))
    conn.execute("VACUUM ANALYZE pgjobs_job")
    _drain_batched(conn, sql, 10, stop_after=20)  # warm the plan and the cache
    _, _, times = _drain_batched(conn, sql, 10, stop_after=250)
    conn.execute(
        "DELETE FROM pgjobs_job WHERE status IN ('ready', 'running') AND run_after <= now()"
    )
    conn.execute("VACUUM ANALYZE pgjobs_job")
    return {
        "p50_ms": 1000 * statistics.median(times),
        "mean_ms": 1000 * statistics.fmean(times),
    }


def claim_cost(url: str, history: int, log, repeat: int = 1) -> dict:
    """Filling millions of rows is slow: each size is filled once, then its claim
    latency measured ``repeat`` times (each time with fresh due jobs, see ``_claim_latency``)."""
    sql = queries()["complete_and_claim_jobs"]
    results = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE pgjobs_job")
        conn.execute(INSERT_HISTORY, (10_000,))
        results["rows_10k"] = medians([_claim_latency(conn, sql) for _ in range(repeat)])
        log(f"   10k rows: {_without_samples(results['rows_10k'])}")
        added = 10_000
        chunk = 500_000
        started = time.time()
        while added < history:
            step = min(chunk, history - added)
            conn.execute(INSERT_HISTORY, (step,))
            added += step
        conn.execute("VACUUM ANALYZE pgjobs_job")
        log(f"   loaded {added:,} rows in {time.time() - started:.0f}s")
        results["rows_large"] = medians([_claim_latency(conn, sql) for _ in range(repeat)])
        results["history_rows"] = added
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('pgjobs_job'))")
        results["table_size"] = size.fetchone()[0]
        conn.execute("TRUNCATE pgjobs_job")
    return results


def _without_samples(figures: dict) -> dict:
    return {key: value for key, value in figures.items() if key != "samples"}


FLOOR_TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_latency_floor (id bigserial PRIMARY KEY, "
    "status text NOT NULL DEFAULT 'ready', sent float8 NOT NULL);"
    "CREATE INDEX IF NOT EXISTS bench_latency_floor_ready ON bench_latency_floor (id) "
    "WHERE status = 'ready'"
)
FLOOR_ENQUEUE = (
    "WITH job AS (INSERT INTO bench_latency_floor (sent) VALUES (%(sent)s) RETURNING sent) "
    "SELECT pg_notify('bench_floor', sent::text) FROM job"
)
FLOOR_CLAIM = (
    "UPDATE bench_latency_floor SET status = 'running' WHERE id = (SELECT id "
    "FROM bench_latency_floor WHERE status = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING sent"
)


def _floor_consumer(url: str, claim: bool, count: int, ready, results) -> None:
    """(Child process.) LISTEN; for each notification, the time since the producer's clock
    reading, after claiming the job when ``claim``."""
    delays = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("LISTEN bench_floor")
        ready.set()
        while len(delays) < count:
            (note,) = conn.notifies(stop_after=1)
            if claim:
                (sent,) = conn.execute(FLOOR_CLAIM, prepare=True).fetchone()
            else:
                sent = float(note.payload)
            delays.append(time.time() - sent)
    results.put(delays)


def _floor_once(url: str, claim: bool, count: int, gap: float) -> dict:
    context = multiprocessing.get_context("spawn")
    ready, results = context.Event(), context.Queue()
    consumer = context.Process(target=_floor_consumer, args=(url, claim, count, ready, results))
    consumer.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("the latency-floor consumer did not start")
        time.sleep(0.5)
        with psycopg.connect(url, autocommit=True) as producer:
            producer.execute("TRUNCATE bench_latency_floor")
            for pause in gaps(count, gap):  # as the systems' latency measurement
                producer.execute(FLOOR_ENQUEUE, {"sent": time.time()}, prepare=True)
                time.sleep(pause)
        delays = sorted(results.get(timeout=60))
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
    return {"p50_ms": 1000 * percentile(delays, 50), "p99_ms": 1000 * percentile(delays, 99)}


def latency_floor(url: str, count: int, gap: float, repeat: int = 1) -> dict:
    """p50 and p99 of ``count`` jobs ``gap`` seconds apart on average, the notification alone
    and the claim, each the median of ``repeat`` runs."""
    samples = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FLOOR_TABLE)
        try:
            for _ in range(repeat):
                sample = {}
                for name, claim in (("notify", False), ("claim", True)):
                    figures = _floor_once(url, claim, count, gap)
                    sample.update({f"{name}_{key}": value for key, value in figures.items()})
                samples.append(sample)
        finally:
            conn.execute("DROP TABLE bench_latency_floor")
    return medians(samples)
