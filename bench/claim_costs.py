"""What one claim costs a worker woken from idle, next to the latency floor's claim.

    python -m bench.claim_costs                 # a throwaway server with durable commits
    python -m bench.claim_costs --url postgres://postgres@127.0.0.1:5432/postgres --rounds 200

Each round makes one job ready (``enqueue()``), waits 20 ms (the latency benchmark's gaps, so
the server process of the claiming connection has gone idle, as a worker's has), then times the
round trip of the worker's claim statement (``claim_jobs``, prepared, psycopg alone) with the
plan it runs under (``plan_cache_mode = force_custom_plan``: planned at every run) and with a
generic plan (``force_generic_plan``), alternating; ``EXPLAIN ANALYZE`` splits one claim into
planning and execution on the server, and ``EXPLAIN (SUMMARY)`` gives its planning time alone,
right after another statement and after the same idle. Beside them, on the same server: the
latency floor's claim (``sqlbench.FLOOR_CLAIM``: one row, one index) after the same idle, its
planning time as the claim's, and ``SELECT 1`` after 20 ms idle and back to back: what waking
an idle server process costs on this machine.
Medians. Results: ``bench-results/claim-costs-<UTC time>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "pgjobs_claim_costs"
IDLE_SECONDS = 0.02


def _timed(run) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _planning(session, statement: str, params, rounds: int) -> dict[str, float]:
    """The server's planning time of ``statement`` (``EXPLAIN (SUMMARY)``: planned, not run)
    right after another statement and after 20 ms idle, alternating; medians in ms."""
    times: dict[str, list[float]] = {"back_to_back": [], "after_idle": []}
    for _ in range(rounds):
        for moment, values in times.items():
            if moment == "after_idle":
                time.sleep(IDLE_SECONDS)
            else:
                session.execute("SELECT 1")
            (explained,) = session.execute(
                "EXPLAIN (SUMMARY, FORMAT JSON) " + statement, params()
            ).fetchone()
            values.append(explained[0]["Planning Time"])
    return {moment: round(statistics.median(values), 3) for moment, values in times.items()}


def measure(url: str, rounds: int, out: str) -> None:
    """(Child process, Django set up on ``url``'s database.) Every figure, written to ``out``."""
    import django

    django.setup()
    import psycopg

    import bench.pgjobs_jobs as bench_jobs
    from bench import sqlbench
    from django_pgjobs.claims import ClaimBuilder, ClaimPlan
    from django_pgjobs.sql import query

    builder = ClaimBuilder(worker="claim-costs", queues=None, lease_seconds=300, prepared=True)
    plan = ClaimPlan.all_start(4)
    claim = query("claim_jobs")
    sessions = {}
    for mode in ("force_custom_plan", "force_generic_plan"):
        sessions[mode] = psycopg.connect(url, autocommit=True)
        sessions[mode].execute(f"SET plan_cache_mode = {mode}")
    other = psycopg.connect(url, autocommit=True)
    samples: dict[str, list[float]] = {mode: [] for mode in sessions}
    for _ in range(rounds):
        for mode, session in sessions.items():
            bench_jobs.noop.enqueue()
            time.sleep(IDLE_SECONDS)
            params = dict(builder.claim(plan).params)
            started = time.perf_counter()
            rows = session.execute(claim, params, prepare=True).fetchall()
            samples[mode].append((time.perf_counter() - started) * 1000)
            assert len(rows) == 1, rows
            other.execute("DELETE FROM pgjobs_job")
    bench_jobs.noop.enqueue()
    time.sleep(IDLE_SECONDS)
    (explained,) = other.execute(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + claim, dict(builder.claim(plan).params)
    ).fetchone()
    other.execute("DELETE FROM pgjobs_job")

    planning = _planning(other, claim, lambda: dict(builder.claim(plan).params), rounds)

    other.execute(sqlbench.FLOOR_TABLE)
    floor_session = psycopg.connect(
        url, autocommit=True
    )  # PostgreSQL's default plans, as the floor
    floor, idle_select, warm_select = [], [], []
    try:
        for _ in range(rounds):
            other.execute("INSERT INTO bench_latency_floor (sent) VALUES (0)")
            time.sleep(IDLE_SECONDS)
            floor.append(_timed(lambda: floor_session.execute(sqlbench.FLOOR_CLAIM, prepare=True)))
            time.sleep(IDLE_SECONDS)
            idle_select.append(_timed(lambda: floor_session.execute("SELECT 1", prepare=True)))
            warm_select.append(_timed(lambda: floor_session.execute("SELECT 1", prepare=True)))
        planning.update(
            {
                f"floor_claim_{name}": value
                for name, value in _planning(other, sqlbench.FLOOR_CLAIM, dict, rounds).items()
            }
        )
    finally:
        other.execute("DROP TABLE bench_latency_floor")

    def median(values: list[float]) -> float:
        return round(statistics.median(values[5:] or values), 3)

    results = {
        "rounds": rounds,
        "claim_jobs_planned_each_run_ms": median(samples["force_custom_plan"]),
        "claim_jobs_generic_plan_ms": median(samples["force_generic_plan"]),
        "claim_jobs_planning_ms": explained[0]["Planning Time"],
        "claim_jobs_execution_ms": explained[0]["Execution Time"],
        "claim_jobs_planning_back_to_back_ms": planning["back_to_back"],
        "claim_jobs_planning_after_idle_ms": planning["after_idle"],
        "floor_claim_planning_back_to_back_ms": planning["floor_claim_back_to_back"],
        "floor_claim_planning_after_idle_ms": planning["floor_claim_after_idle"],
        "floor_claim_ms": median(floor),
        "select_1_after_idle_ms": median(idle_select),
        "select_1_back_to_back_ms": median(warm_select),
    }
    Path(out).write_text(json.dumps(results, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out:  # the child
        measure(os.environ["BENCH_DATABASE_URL"], args.rounds, args.out)
        return 0

    from bench.run import django_database, server_settings

    _, url, env, out = django_database(args.url, DATABASE, "claim-costs")
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v0"], cwd=ROOT, env=env, check=True
    )
    subprocess.run(
        [sys.executable, "-m", "bench.claim_costs", "--rounds", str(args.rounds)]
        + ["--out", str(out / "results.json")],
        cwd=ROOT,
        env=env,
        check=True,
    )
    results = json.loads((out / "results.json").read_text())
    results["server"] = server_settings(url)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    for name, value in results.items():
        if name != "server":
            print(f"{name:34s} {value}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
