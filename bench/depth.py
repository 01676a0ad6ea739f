"""The claim and the enqueue at depth: 1k, 100k, 1M and 10M *ready* rows in ``pgjobs_job``, and
with a long transaction holding the xmin horizon while claims and deletes go on.

    python -m bench.depth                          # every size, then the held horizon
    python -m bench.depth --sizes 1000,100000 --rounds 100
    python -m bench.depth --only horizon --horizon-jobs 60000
    python -m bench.depth --only sizes --sizes 1000000 --running 10000   # beside running jobs
    python -m bench.depth --base-migration 0022_translatable_names   # each size on both schemas

Each size is seeded with ``generate_series`` (due jobs spread over the last two hours, then
``VACUUM ANALYZE`` and a ``CHECKPOINT``), then ``--rounds`` rounds run, each: 200 new due jobs
(one statement, not timed: the depth stays put), one claim as ``runjobs`` with no flags issues
it (``claim_jobs`` from the project's own ``ClaimBuilder``, a batch of ``MAX_HELD`` = 200 jobs,
one of them started: concurrency 1), a heartbeat for the jobs it took (``extend_leases``),
then the acknowledgement of them (``complete_jobs``). Every tenth round the claim runs under
``EXPLAIN (ANALYZE, BUFFERS)`` instead: the buffers it touched and the rows its index scan returned and filtered do not
depend on the machine's load, the wall times do. Then ``--enqueues`` calls of ``enqueue()``,
one per transaction. The figures are medians (and p90) of the rounds.

The horizon: a REPEATABLE READ transaction on another connection takes its snapshot, then the
rounds go on at 100k ready rows; every ``--horizon-step`` jobs claimed and deleted, the claim's
buffers and time are recorded. Each size uses a database of its own on the server, dropped
afterwards. Without ``--url`` a throwaway server is started with durable commits, as
``python -m bench`` does. Results: ``bench-results/depth-<UTC time>/`` (``results.json``,
``results.md``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg

from bench.depth_report import write

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1_000, 100_000, 1_000_000, 10_000_000)
DATABASE = "pgjobs_depth"
BATCH = 200  # runjobs' default batch (worker.holding.MAX_HELD), checked in claim_plan()

# A backlog: due jobs spread over the two hours before the seeding, in id order.
SEED = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'ready',
       now() - interval '2 hours' + (i::float8 / %(total)s) * interval '1 hour', 0, 5,
       now() - interval '2 hours' + (i::float8 / %(total)s) * interval '1 hour', '', '[]'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
"""
# Jobs other workers are running (``--running``): leases an hour ahead, never rescued here.
RUNNING = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, started_at, worker, errors, claim_token,
                        lease_expires_at)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'running', now(), 1, 5, now(), now(),
       'other-' || (i %% 50), '[]', gen_random_uuid(), now() + interval '1 hour'
FROM generate_series(1, %s) AS i
"""
REFILL = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'ready', now(), 0, 5, now(), '', '[]'
FROM generate_series(1, %s)
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def setup_django(server: str, names: list[str]) -> None:
    """Django on the server: one database alias per name (``depth_<name>``, a database of that
    name), the first also the default; each created empty and migrated by ``fresh_database``."""
    os.environ["BENCH_DATABASE_URL"] = database_url(server, names[0])
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.pgjobs_settings"
    from django.conf import settings

    from testproject.settings import database_from_url

    for name in names:
        settings.DATABASES[alias(name)] = {
            **database_from_url(database_url(server, name)),
            "CONN_MAX_AGE": None,
        }
    import django

    django.setup()


def alias(name: str) -> str:
    return f"depth_{name}"


def claim_plan():
    """The claim of a worker started with no flags: ``MAX_HELD`` jobs, one started."""
    from django_pgjobs.claims import ClaimBuilder, ClaimPlan
    from django_pgjobs.conf import get_config
    from django_pgjobs.worker.holding import MAX_HELD

    assert MAX_HELD == BATCH, "runjobs' default batch changed: update BATCH"
    builder = ClaimBuilder(
        worker="bench-depth", queues=None, lease_seconds=get_config().LEASE_SECONDS
    )
    return builder, ClaimPlan(limit=BATCH, sync_room=BATCH, sync_starts=1)


def seed(conn, total: int, running: int = 0) -> float:
    """``total`` due jobs, in statements of a million rows, and ``running`` jobs of other
    workers; the seconds it took."""
    started = time.perf_counter()
    if running:
        conn.execute(RUNNING, (running,))
    first = 1
    while first <= total:
        last = min(total, first + 999_999)
        conn.execute(SEED, {"first": first, "last": last, "total": total})
        first = last + 1
    conn.execute("VACUUM ANALYZE pgjobs_job")
    conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def explain_claim(conn, params: dict) -> dict:
    """The claim under EXPLAIN (ANALYZE, BUFFERS), committed, then its jobs deleted."""
    from django_pgjobs import sql

    text = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.query("claim_jobs")
    plan = conn.execute(text, params).fetchone()[0][0]
    conn.execute("DELETE FROM pgjobs_job WHERE claim_token = %s", (params["token"],))
    scan = find_scan(plan["Plan"])
    return {
        "ms": plan["Execution Time"],
        "hit": plan["Plan"]["Shared Hit Blocks"],
        "read": plan["Plan"]["Shared Read Blocks"],
        "scan": f"{scan['Node Type']} on {scan.get('Index Name', scan.get('Relation Name'))}",
        "scan_rows": scan["Actual Rows"],
        "scan_filtered": scan.get("Rows Removed by Filter", 0),
        "scan_hit": scan["Shared Hit Blocks"],
        "shape": shape(plan["Plan"]),
    }


def find_scan(node: dict) -> dict:
    """The scan of pgjobs_job that finds the candidates (the deepest one under LockRows)."""
    if node.get("Relation Name") == "pgjobs_job" and "Scan" in node["Node Type"]:
        if node.get("Parent Relationship") != "Member":
            return node
    for child in node.get("Plans", []):
        found = find_scan_or_none(child)
        if found:
            return found
    raise LookupError("no scan of pgjobs_job in the claim's plan")


def find_scan_or_none(node: dict) -> dict | None:
    try:
        return find_scan(node)
    except LookupError:
        return None


def shape(node: dict, depth: int = 0) -> list[str]:
    """The plan as indented node names (index and relation named)."""
    name = node["Node Type"]
    target = node.get("Index Name") or node.get("Relation Name")
    lines = ["  " * depth + (f"{name} ({target})" if target else name)]
    for child in node.get("Plans", []):
        lines += shape(child, depth + 1)
    return lines


class Depth:
    """One database at one depth: its psycopg connection (seeding, EXPLAIN) and its Django
    connection (the claims and acknowledgements, through ``operations.complete``)."""

    def __init__(self, server: str, name: str, rows: int, migration: str | None = None) -> None:
        from django.db import connections

        self.name, self.rows = name, rows
        self.pg = psycopg.connect(fresh_database(server, name, migration), autocommit=True)
        self.connection = connections[alias(name)]
        self.builder, self.plan = claim_plan()
        self.rounds: list[dict] = []
        self.enqueues: list[float] = []

    def round(self, explain: bool, keep: bool = True) -> dict:
        """Refill (not timed), then claim and acknowledge (timed), or the claim EXPLAINed."""
        from django_pgjobs import operations

        self.pg.execute(REFILL, (BATCH,))
        claim = self.builder.claim(self.plan)
        if explain:
            figures = {"explain": explain_claim(self.pg, claim.params)}
        else:
            started = time.perf_counter()
            claimed = operations.complete(self.connection, claim=claim).claimed
            claimed_at = time.perf_counter()
            operations.heartbeat(self.connection, claimed)
            beat_at = time.perf_counter()
            operations.complete(self.connection, claimed)
            done_at = time.perf_counter()
            figures = {
                "claim_ms": 1000 * (claimed_at - started),
                "heartbeat_ms": 1000 * (beat_at - claimed_at),
                "ack_ms": 1000 * (done_at - beat_at),
                "claimed": len(claimed),
            }
        if keep:
            self.rounds.append(figures)
        return figures

    def enqueue(self, count: int) -> None:
        """``enqueue()`` of a no-op job, one per transaction, into this database."""
        from django.conf import settings
        from django.test.utils import override_settings

        from bench.pgjobs_jobs import noop
        from django_pgjobs import enqueue

        with override_settings(PGJOBS={**settings.PGJOBS, "DATABASE": alias(self.name)}):
            for _ in range(count):
                started = time.perf_counter()
                enqueue(noop)
                self.enqueues.append(1000 * (time.perf_counter() - started))

    def figures(self) -> dict:
        found = summarize(self.rounds)
        found["enqueue_ms_p50"] = statistics.median(self.enqueues)
        found["enqueue_ms_p90"] = percentile(self.enqueues, 0.9)
        return {**found, **table_sizes(self.pg)}


def summarize(rounds: list[dict]) -> dict:
    """Medians (and p90 of the timings) of the rounds; the EXPLAINed ones give the buffers."""
    timed = [r for r in rounds if "claim_ms" in r]
    explained = [r["explain"] for r in rounds if "explain" in r]
    figures = {
        "claim_ms_p50": statistics.median(r["claim_ms"] for r in timed),
        "claim_ms_p90": percentile([r["claim_ms"] for r in timed], 0.9),
        "ack_ms_p50": statistics.median(r["ack_ms"] for r in timed),
        "heartbeat_ms_p50": statistics.median(r["heartbeat_ms"] for r in timed),
        "claimed_p50": statistics.median(r["claimed"] for r in timed),
        "rounds": len(timed),
    }
    for key in ("ms", "hit", "read", "scan_rows", "scan_filtered", "scan_hit"):
        figures[f"explain_{key}_p50"] = statistics.median(e[key] for e in explained)
    figures["explain_scan"] = explained[-1]["scan"]
    figures["explain_shape"] = explained[-1]["shape"]
    return figures


def table_sizes(pg) -> dict:
    row = pg.execute(
        "SELECT pg_table_size('pgjobs_job'), pg_indexes_size('pgjobs_job'), "
        "(SELECT count(*) FROM pgjobs_job WHERE status = 'ready')"
    ).fetchone()
    return {"table_bytes": row[0], "index_bytes": row[1], "ready_after": row[2]}


def measure_sizes(server: str, sizes: list[int], args) -> dict:
    """Every size seeded, then the rounds interleaved: round i runs once at every depth, in an
    order turned by one each round, so the load of the moment falls on all depths alike."""
    depths = []
    for size in sizes:
        for name, migration in ((str(size), None), (f"{size}_base", args.base_migration)):
            if name.endswith("_base") and not migration:
                continue
            depth = Depth(server, name, size, migration)
            took = seed(depth.pg, size, args.running)
            log(f"{name:>15}: {size:,} ready rows (and {args.running:,} running) in {took:.0f} s")
            depths.append(depth)
    for depth in depths:
        for _ in range(10):  # warm the caches and the connection
            depth.round(explain=False, keep=False)
    for i in range(args.rounds):
        for depth in depths[i % len(depths) :] + depths[: i % len(depths)]:
            depth.round(explain=i % 10 == 0)
            if i % 10 == 5:
                depth.enqueue(args.enqueues // (args.rounds // 10))
    results = {}
    for depth in depths:
        label = f"{depth.rows} at {args.base_migration}" if "_" in depth.name else depth.rows
        results[label] = depth.figures()
        log(f"{label}: {brief(results[label])}")
        depth.pg.close()
    return results


def brief(figures: dict) -> str:
    keys = (
        "claim_ms_p50",
        "ack_ms_p50",
        "heartbeat_ms_p50",
        "explain_ms_p50",
        "explain_hit_p50",
        "explain_read_p50",
        "explain_scan_rows_p50",
        "enqueue_ms_p50",
    )
    return ", ".join(f"{k} {figures[k]:.2f}" for k in keys if k in figures)


def measure_horizon(server: str, args) -> dict:
    """Claims and deletes at ``--horizon-size`` ready rows while a snapshot is held."""
    depth = Depth(server, "horizon", args.horizon_size)
    seed(depth.pg, args.horizon_size)
    points = [{"jobs_since_snapshot": 0, **horizon_step(depth, 20)}]
    with psycopg.connect(database_url(server, "horizon")) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgjobs_queue")  # takes the snapshot
        done = 0
        while done < args.horizon_jobs:
            figures = horizon_step(depth, args.horizon_step // BATCH)
            done += args.horizon_step
            points.append({"jobs_since_snapshot": done, **figures})
            log(f"horizon held, {done:,} jobs since: {brief(points[-1])}")
        holder.rollback()
    points.append({"jobs_since_snapshot": "released", **horizon_step(depth, 20)})
    log(f"horizon released: {brief(points[-1])}")
    dead = depth.pg.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgjobs_job'"
    )
    points[-1]["n_dead_tup"] = dead.fetchone()[0]
    depth.pg.close()
    return {"size": args.horizon_size, "points": points}


def horizon_step(depth: Depth, rounds: int) -> dict:
    """``rounds`` rounds; the figures of the last 20 of them (every other one EXPLAINed)."""
    depth.rounds = []
    for i in range(rounds):
        depth.round(explain=i % 2 == 0, keep=i >= rounds - 20)
    return summarize(depth.rounds)


def fresh_database(server: str, name: str, migration: str | None = None) -> str:
    """An empty database for ``name`` (dropped first), migrated (up to django_pgjobs'
    ``migration`` when given); its URL."""
    from django.core.management import call_command
    from django.db import connections

    connections[alias(name)].close()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}_{name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}_{name}")
    target = ("django_pgjobs", migration) if migration else ()
    call_command("migrate", *target, database=alias(name), verbosity=0)
    return database_url(server, name)


def drop_databases(server: str, names: list[str]) -> None:
    from django.db import connections

    connections.close_all()
    with psycopg.connect(server, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}_{name} WITH (FORCE)")


def start_server(url: str | None) -> str:
    if url:
        return url
    from bench.run import make_durable
    from testproject import throwaway_pg

    server = throwaway_pg.start()
    make_durable(server)
    return server


def database_url(server: str, name: str) -> str:
    return server.rsplit("/", 1)[0] + f"/{DATABASE}_{name}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.depth", description=__doc__)
    parser.add_argument("--url", help="a server to use as it is (default: a throwaway one)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--rounds", type=int, default=200, help="claims per size (10 or more)")
    parser.add_argument("--enqueues", type=int, default=400, help="enqueue() calls per size")
    parser.add_argument("--only", choices=("sizes", "horizon"), help="one part only")
    parser.add_argument(
        "--base-migration",
        help="also run each size on a schema migrated only up to this django_pgjobs migration "
        "(the indexes before a change), in the same interleaved rounds",
    )
    parser.add_argument(
        "--running",
        type=int,
        default=0,
        help="also seed this many jobs running for 50 other workers (leases an hour ahead): "
        "the claim and the acknowledgement beside every worker's running jobs",
    )
    parser.add_argument("--horizon-size", type=int, default=100_000)
    parser.add_argument("--horizon-jobs", type=int, default=60_000)
    parser.add_argument("--horizon-step", type=int, default=10_000)
    parser.add_argument("--out", help="default: bench-results/depth-<UTC time>")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [*map(str, sizes), *(f"{size}_base" for size in sizes), "horizon"]
    server = start_server(args.url)
    setup_django(server, names)
    stamp = time.strftime("depth-%Y-%m-%dT%H%MZ", time.gmtime())
    out = Path(args.out or ROOT / "bench-results" / stamp)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"meta": meta(argv, server)}
    try:
        if args.only != "horizon":
            results["sizes"] = measure_sizes(server, sizes, args)
            write(out, results)
        if args.only != "sizes":
            results["horizon"] = measure_horizon(server, args)
            write(out, results)
    finally:
        drop_databases(server, names)
    print((out / "results.md").read_text())
    return 0


def meta(argv: list[str], server: str) -> dict:
    from bench.run import checked_out_commit, server_settings

    return {
        "command": "python -m bench.depth " + " ".join(argv),
        "commit": checked_out_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "server": server_settings(server),
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
