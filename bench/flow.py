"""The flow claim's cost against the plain claim: ``python -m bench.flow``.

Each measurement fills pgjobs_job (and pgjobs_flow_key) with ready jobs, then 1 or 2 worker
processes each claim batches of 10 and complete them at once (claim, then complete_jobs: two
statements per batch, as a worker with acknowledgements not folded in), ``--claims`` times;
jobs/s is all the jobs claimed over the wall time. Kinds: ``plain`` (claim_jobs, no keys), and
claim_jobs_flow with ``concurrency`` keys (limit 1), ``rate`` keys (a rate far above what is
claimed: the bucket is refilled and spent on every claim, never binding) and ``fairness`` keys,
at 1,000 and 100,000 distinct keys (each key holding ``--per-key`` jobs or more: twice what the
claims take, so no process runs dry; the plain fill holds as many jobs). Medians of ``--repeat`` runs; the ratio to the plain claim of the same run and
process count. Without ``DATABASE_URL`` it starts a throwaway PostgreSQL (durable commits off:
the tests' server, so figures compare statements, not disks). Prints one table; writes nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

from django_pgjobs.sql import QUERIES

ROOT = Path(__file__).resolve().parent.parent

FILL_JOBS = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors, flow_key)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'ready', now() - interval '1 second', 0, 5,
       now(), '', '[]', CASE WHEN %(prefix)s <> '' THEN %(prefix)s || (i %% %(keys)s) END
FROM generate_series(1, %(jobs)s) AS i
"""
FILL_KEYS = """
INSERT INTO pgjobs_flow_key (key, concurrency_limit, rate, burst, tokens, refilled_at, ready_at)
SELECT %(prefix)s || i, %(limit)s::int, %(rate)s::float8, %(burst)s::float8,
       COALESCE(%(burst)s::float8, 0), now(),
       now() - interval '1 second'
FROM generate_series(0, %(keys)s - 1) AS i
"""
KINDS = {  # prefix, concurrency limit, rate per second, burst
    "concurrency": ("key:", 1, None, None),
    "rate": ("job:", None, 1e6, 1e5),
    "fairness": ("fair:", None, None, None),
}


def claim_params(worker: str) -> dict:
    return {
        "worker": worker,
        "all_queues": True,
        "queues": [],
        "lease_seconds": 60.0,
        "any_id": True,
        "only_ids": [],
        "limit": 10,
        "sync_room": 10,
        "sync_starts": 10,
        "async_room": 0,
        "async_starts": 0,
        "async_names": [],
        "any_name": True,
        "skip_names": [],
        "lanes": 28,
    }


def work(url: str, statement: str, claims: int, start, done) -> None:
    """One worker process: ``claims`` claims of 10, each completed at once; puts the count."""
    text = QUERIES
    with psycopg.connect(url, autocommit=True) as conn:
        params = claim_params(f"bench-{os.getpid()}")
        start.wait()
        taken = 0
        for _ in range(claims):
            token = uuid.uuid4()
            rows = conn.execute(text[statement], {**params, "token": token}).fetchall()
            ids = [row[0] for row in rows if row[0] is not None]
            conn.execute(text["complete_jobs"], {"ids": ids, "tokens": [token] * len(ids)})
            taken += len(ids)
        done.put(taken)


def measure(url: str, kind: str, keys: int, per_key: int, processes: int, claims: int) -> float:
    """Jobs/s of ``processes`` workers claiming from a fresh fill of ``kind``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE pgjobs_job, pgjobs_flow_key")
        prefix, limit, rate, burst = KINDS.get(kind, ("", None, None, None))
        # enough jobs that no process runs dry: claims x 10 x processes, with room to spare
        jobs = max(keys * per_key, claims * 10 * processes * 2)
        fill = {"prefix": prefix, "keys": keys, "jobs": jobs}
        conn.execute(FILL_JOBS, fill)
        if prefix:
            conn.execute(FILL_KEYS, {**fill, "limit": limit, "rate": rate, "burst": burst})
        conn.execute("VACUUM ANALYZE pgjobs_job")
        conn.execute("VACUUM ANALYZE pgjobs_flow_key")
    statement = "claim_jobs" if kind == "plain" else "claim_jobs_flow"
    start, done = multiprocessing.Event(), multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=work, args=(url, statement, claims, start, done))
        for _ in range(processes)
    ]
    for process in workers:
        process.start()
    time.sleep(0.5)  # connected
    began = time.perf_counter()
    start.set()
    taken = sum(done.get() for _ in workers)
    elapsed = time.perf_counter() - began
    for process in workers:
        process.join()
    return taken / elapsed


def database() -> str:
    """A migrated database: DATABASE_URL's, or a throwaway server's."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.path.insert(0, str(ROOT))
        from testproject import throwaway_pg

        url = throwaway_pg.start()
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    manage = [sys.executable, str(ROOT / "testproject" / "manage.py"), "migrate", "-v", "0"]
    subprocess.run(manage, env=env, check=True)
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--keys", default="1000,100000")
    args = parser.parse_args()
    url = database()
    print("keys     procs  kind          jobs/s (median)  vs plain")
    for keys in [int(k) for k in args.keys.split(",")]:
        for processes in (1, 2):
            medians = {}
            for kind in ("plain", *KINDS):
                runs = [
                    measure(url, kind, keys, args.per_key, processes, args.claims)
                    for _ in range(args.repeat)
                ]
                medians[kind] = statistics.median(runs)
                ratio = medians[kind] / medians["plain"]
                print(f"{keys:<8} {processes:<6} {kind:<13} {medians[kind]:>15,.0f}  {ratio:.2f}")


if __name__ == "__main__":
    main()
