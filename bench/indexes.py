"""What one job writes: WAL bytes and index entries per job, by phase and by index.

    python -m bench.indexes                 # 5,000 no-op jobs, a throwaway server
    python -m bench.indexes --jobs 20000 --url postgresql://postgres@127.0.0.1:5432/postgres

On a fresh database (autovacuum off on ``pgjobs_job`` while it runs, so that nothing but the
statements measured writes): ``--jobs`` calls of ``enqueue()``, one per transaction; then the
claims of a worker started with no flags (``claim_jobs`` from the project's ``ClaimBuilder``,
batches of 200) until none is left; then their acknowledgement (``complete_jobs``, 200 per
statement, as the worker sends them folded into its next claim). Each phase is bracketed by
``pg_current_wal_lsn()``, after a ``CHECKPOINT`` (so the full page images each phase writes are
those of a phase that follows a checkpoint), and its WAL records are read back with
``pg_walinspect``: the bytes per job, those of full page images apart, and the B-tree inserts
per index (one ``INSERT_LEAF``, ``INSERT_POST`` or leaf ``SPLIT`` record per index entry
written). Those counts
do not depend on the machine's load. Results: ``bench-results/indexes-<UTC time>/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg

from bench.depth import (
    ROOT,
    claim_plan,
    drop_databases,
    fresh_database,
    setup_django,
    start_server,
)

RECORDS = """
SELECT resource_manager, record_type, record_length, fpi_length, block_ref
FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
"""
# a leaf split logs the entry that caused it in its SPLIT_L / SPLIT_R record
ENTRY_RECORDS = {"INSERT_LEAF", "INSERT_POST", "SPLIT_L", "SPLIT_R"}
RELATION = re.compile(r"rel \d+/\d+/(\d+)")


def phases(jobs: int) -> list[tuple[str, object]]:
    """(name, function) of each phase; each returns the number of jobs it handled."""
    from django.db import connection

    from bench.pgjobs_jobs import noop
    from django_pgjobs import enqueue, operations

    builder, plan = claim_plan()
    claimed: list = []

    def enqueue_all() -> int:
        for _ in range(jobs):
            enqueue(noop)
        return jobs

    def claim_all() -> int:
        while True:
            batch = operations.complete(connection, claim=builder.claim(plan)).claimed
            if not batch:
                return len(claimed)
            claimed.extend(batch)

    def complete_all() -> int:
        for first in range(0, len(claimed), 200):
            operations.complete(connection, claimed[first : first + 200])
        return len(claimed)

    return [("enqueue", enqueue_all), ("claim", claim_all), ("complete", complete_all)]


# A busy table for the readers: 200,000 rows over 10 queues, due, scheduled, retrying, running
# (half of those with an expired lease) and retained successful ones.
BUSY = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors, lease_expires_at, finished_at,
                        claim_token)
SELECT 'bench.noop', 'q' || (i % 10), 0, '[]', '{}',
       CASE WHEN i % 100 = 0 THEN 'running' WHEN i % 4 = 0 THEN 'successful' ELSE 'ready' END,
       now() + ((i % 7) - 3) * interval '1 hour', CASE WHEN i % 50 = 1 THEN 1 ELSE 0 END, 5,
       now(), '', '[]',
       CASE WHEN i % 100 = 0 THEN now() + (i % 200 - 100) * interval '1 second' END,
       CASE WHEN i % 4 = 0 AND i % 100 <> 0 THEN now() - interval '3 days' END,
       CASE WHEN i % 100 = 0 THEN gen_random_uuid() END
FROM generate_series(1, 200000) AS i
"""


def readers() -> list[tuple[str, object]]:
    """(name, function) of the code paths that read pgjobs_job besides the worker's claim."""
    from django.db import connection

    from django_pgjobs import operations, overview
    from django_pgjobs.models import Job

    return [
        ("rescue (rescue_expired)", lambda: operations.rescue_expired(connection)),
        ("prune (prune_succeeded)", lambda: operations.prune_succeeded(connection, 86400.0)),
        ("queue names (job_queue_names)", lambda: operations.queue_names(connection)),
        ("dashboard and metrics (queue_overview)", lambda: overview.queue_overview(connection)),
        ("admin: jobs of one queue", lambda: list(Job.objects.in_queue("q3")[:50])),
        ("admin: running jobs", lambda: list(Job.objects.in_view("running")[:50])),
        ("admin: due jobs", lambda: list(Job.objects.in_view("due")[:50])),
    ]


def index_scans(pg) -> Counter:
    pg.execute("SELECT pg_stat_force_next_flush()")
    pg.execute("SELECT pg_sleep(0)")
    rows = pg.execute(
        "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE relname = 'pgjobs_job'"
    )
    return Counter(dict(rows.fetchall()))


def index_use(pg) -> dict[str, list[str]]:
    """The indexes of pgjobs_job each reader scanned (pg_stat_user_indexes), on a busy table."""
    from django.db import connection

    pg.execute(BUSY)
    pg.execute("ANALYZE pgjobs_job")
    used = {}
    for name, run in readers():
        connection.close()  # a new backend: its counters flushed when it ends
        before = index_scans(pg)
        run()
        connection.close()
        time.sleep(0.2)
        used[name] = sorted(index for index, n in (index_scans(pg) - before).items() if n > 0)
    return used


def measure_phase(pg, run, names: dict[str, str]) -> dict:
    pg.execute("CHECKPOINT")
    start = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    count = run()
    end = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    total = pg.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start)).fetchone()[0]
    fpi, entries, by_manager = 0, Counter(), Counter()
    for manager, kind, length, fpi_length, block_ref in pg.execute(RECORDS, (start, end)):
        fpi += fpi_length
        by_manager[manager] += length
        if manager == "Btree" and kind in ENTRY_RECORDS:
            found = RELATION.search(block_ref or "")
            entries[names.get(found[1], "?") if found else "?"] += 1
    return {
        "jobs": count,
        "wal_bytes_per_job": float(total) / count,
        "fpi_bytes_per_job": fpi / count,
        "wal_bytes_per_job_without_fpi": (float(total) - fpi) / count,
        "record_bytes_per_job_by_manager": {k: v / count for k, v in by_manager.items()},
        "index_entries_per_job": {k: v / count for k, v in sorted(entries.items())},
    }


def relation_names(pg) -> dict[str, str]:
    """Index names by relfilenode (what the WAL records name)."""
    rows = pg.execute(
        "SELECT relfilenode::text, relname FROM pg_class WHERE relname LIKE 'pgjobs_job%%' "
        "AND relkind = 'i'"
    )
    return dict(rows.fetchall())


def report(results: dict) -> str:
    lines = [
        f"{results['meta']['jobs']:,} no-op jobs, {results['meta']['date']}, "
        f"commit {results['meta']['commit'][:10]}",
        "",
        "| phase | WAL bytes per job | of which full page images | index entries per job |",
        "|---|---:|---:|---|",
    ]
    for name, f in results["phases"].items():
        entries = ", ".join(f"{k} {v:g}" for k, v in f["index_entries_per_job"].items())
        lines.append(
            f"| {name} | {f['wal_bytes_per_job']:,.0f} | {f['fpi_bytes_per_job']:,.0f} | "
            f"{entries} |"
        )
    total = sum(f["wal_bytes_per_job"] for f in results["phases"].values())
    lines.append(f"| **whole job** | **{total:,.0f}** | | |")
    lines += ["", "| code path | indexes of pgjobs_job it scanned |", "|---|---|"]
    for name, indexes in results["index_use"].items():
        lines.append(f"| {name} | {', '.join(indexes) or '(none: read whole)'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.indexes", description=__doc__)
    parser.add_argument("--url", help="a server to use as it is (default: a throwaway one)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--fillfactor", type=int, help="of pgjobs_job (default: as migrated)")
    parser.add_argument("--out", help="default: bench-results/indexes-<UTC time>")
    args = parser.parse_args(argv)
    server = start_server(args.url)
    setup_django(server, ["indexes"])
    from bench.run import checked_out_commit

    stamp = time.strftime("indexes-%Y-%m-%dT%H%MZ", time.gmtime())
    out = Path(args.out or ROOT / "bench-results" / stamp)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "python -m bench.indexes " + " ".join(argv),
        "commit": checked_out_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "jobs": args.jobs,
        "fillfactor": args.fillfactor,
    }
    try:
        url = fresh_database(server, "indexes")
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            pg.execute("ALTER TABLE pgjobs_job SET (autovacuum_enabled = off)")
            if args.fillfactor:
                pg.execute(f"ALTER TABLE pgjobs_job SET (fillfactor = {int(args.fillfactor)})")
            names = relation_names(pg)
            measured = {name: measure_phase(pg, run, names) for name, run in phases(args.jobs)}
            used = index_use(pg)
    finally:
        drop_databases(server, ["indexes"])
    results = {"meta": meta, "phases": measured, "index_use": used}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(report(results))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
