"""Sustained load: enqueue and drain together for an hour, and watch what grows.

    python -m bench.soak                         # 60 minutes at 50% of the measured drain
    python -m bench.soak --minutes 15 --rate 8000 --sample 15

First the no-flags drain of ``--workers`` ``runjobs`` processes is measured (30,000 no-op jobs,
commit -> empty, median of 3) unless ``--rate`` is given; the load is ``--fraction`` of it
(0.5). Then the same workers run for ``--minutes`` while one producer process enqueues no-op jobs
at that rate with ``enqueue_many`` (a batch every 10 ms, each its own transaction, the count
kept on schedule from the start) and, every ``--probe-gap`` seconds, one probe job with
``enqueue()`` alone, whose enqueue -> start delay the probe records: the latency of a job that
arrives in a busy queue.

Every ``--sample`` seconds: the table's and its indexes' size, live and dead tuples,
autovacuum and autoanalyze runs (``pg_stat_user_tables``), the backlog (ready jobs), jobs
enqueued and finished since the last sample, and the probes' p50 and p99 in the window. At the
end, each series' trend after the first ``--settle`` minutes (10): the Theil-Sen slope (one
stall does not make a trend), as the change it predicts over that stretch against the median. Results:
``bench-results/soak-<UTC time>/`` (``results.json``, ``results.md``). Without ``--url`` (or
``DATABASE_URL``) a throwaway server is started with durable commits, as ``python -m bench``
does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.drivers.common import read_report
from bench.run import recreate_database

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "pgjobs_soak"
DRAIN_JOBS = 30_000

SAMPLE = """
SELECT pg_table_size('pgjobs_job'), pg_indexes_size('pgjobs_job'), s.n_live_tup,
       s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count, s.vacuum_count,
       (SELECT count(*) FROM pgjobs_job WHERE status = 'ready'),
       (SELECT last_value FROM pgjobs_job_id_seq),
       (SELECT count(*) FROM pgjobs_job)
FROM pg_stat_user_tables AS s WHERE s.relname = 'pgjobs_job'
"""
COLUMNS = (
    "table_bytes",
    "index_bytes",
    "live",
    "dead",
    "autovacuums",
    "autoanalyzes",
    "vacuums",  # run by the workers (VACUUM_INTERVAL_SECONDS) or by hand
    "backlog",
    "enqueued_total",
    "rows",
)
TRENDS = ("table_bytes", "index_bytes", "dead", "backlog", "p50_ms", "p99_ms")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def slope_change(points: list[tuple[float, float]]) -> float | None:
    """The change over the points' span of their Theil-Sen line (the median of the slopes
    between every two points: one stall of a minute does not make a trend), as a fraction of
    their median."""
    points = [(x, y) for x, y in points if y == y]  # NaN: a window without probes
    if len(points) < 3:
        return None
    slopes = [
        (b[1] - a[1]) / (b[0] - a[0])
        for i, a in enumerate(points)
        for b in points[i + 1 :]
        if b[0] != a[0]
    ]
    middle = statistics.median(p[1] for p in points)
    if not slopes or not middle:
        return None
    return statistics.median(slopes) * (points[-1][0] - points[0][0]) / middle


def trends(samples: list[dict], settle: float, minutes: float) -> dict[str, float | None]:
    """Each series' trend from minute ``settle`` to the end of the load (a sample taken after
    the producer stopped is left out)."""
    settled = [s for s in samples if settle <= s["minute"] <= minutes]
    return {name: slope_change([(s["minute"], float(s[name])) for s in settled]) for name in TRENDS}


class Soak:
    def __init__(self, args: argparse.Namespace, server: str) -> None:
        self.args = args
        base, _, _ = server.rpartition("/")
        self.url = f"{base}/{DATABASE}"
        self.out = Path(
            args.out or ROOT / "bench-results" / time.strftime("soak-%Y-%m-%dT%H%MZ", time.gmtime())
        )
        self.out.mkdir(parents=True, exist_ok=True)
        self.probe_file = self.out / "probes.txt"
        recreate_database(server, DATABASE)
        self.driver("setup")

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "BENCH_DATABASE_URL": self.url, "PYTHONPATH": str(ROOT), **extra}

    def driver(self, *args: str, **popen) -> subprocess.Popen | dict:
        command = [sys.executable, "-m", "bench.drivers.pgjobs", *args]
        if popen:
            return subprocess.Popen(command, cwd=ROOT, env=self.env(), **popen)
        out = subprocess.run(command, cwd=ROOT, env=self.env(), capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"{args}: {out.stderr[-3000:]}")
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    def start_workers(self) -> list[subprocess.Popen]:
        env = self.env(BENCH_PROBE_FILE=str(self.probe_file))
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.drivers.pgjobs", "worker"],
                cwd=ROOT,
                env=env,
                stdout=open(self.out / f"worker-{i}.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
            )
            for i in range(self.args.workers)
        ]
        time.sleep(3 + self.args.workers)
        return workers

    @staticmethod
    def stop(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()

    def drain_rate(self) -> float:
        """The no-flags drain of the workers: commit -> empty, the producer held alive."""
        rates = []
        for _ in range(3):
            workers = self.start_workers()
            try:
                producer = self.driver(
                    "bulk",
                    str(DRAIN_JOBS),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                committed = read_report(producer, "the bulk enqueue")["end"]
                with psycopg.connect(self.url, autocommit=True) as conn:
                    while conn.execute("SELECT 1 FROM pgjobs_job LIMIT 1").fetchone():
                        time.sleep(0.005)
                rates.append(DRAIN_JOBS / (time.time() - committed))
                producer.communicate("go\n", timeout=60)
            finally:
                self.stop(workers)
            log(f"drain: {rates[-1]:,.0f} jobs/s")
        return statistics.median(rates)

    def run(self) -> dict:
        args = self.args
        drain = None if args.rate else self.drain_rate()
        rate = args.rate or round(args.fraction * drain)
        log(f"load: {rate:,} jobs/s for {args.minutes} min with {args.workers} workers")
        self.probe_file.write_text("")
        workers = self.start_workers()
        seconds = args.minutes * 60
        producer = self.driver(
            "soak",
            str(rate),
            str(seconds),
            str(args.probe_gap),
            stdout=open(self.out / "producer.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        samples = []
        started = time.time()
        read_at = 0
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                previous = None
                while time.time() - started < seconds and producer.poll() is None:
                    time.sleep(args.sample)
                    row = dict(zip(COLUMNS, conn.execute(SAMPLE).fetchone(), strict=True))
                    with self.probe_file.open() as handle:
                        handle.seek(read_at)
                        chunk = handle.read()
                    complete = chunk[: chunk.rfind("\n") + 1]
                    read_at += len(complete)
                    delays = [float(line.split()[1]) * 1000 for line in complete.splitlines()]
                    row["minute"] = round((time.time() - started) / 60, 2)
                    row["p50_ms"] = percentile(delays, 0.5)
                    row["p99_ms"] = percentile(delays, 0.99)
                    row["probes"] = len(delays)
                    done_total = row["enqueued_total"] - row["rows"]
                    if previous:
                        span = row["minute"] * 60 - previous["minute"] * 60
                        row["enqueued_per_s"] = (
                            row["enqueued_total"] - previous["enqueued_total"]
                        ) / span
                        row["finished_per_s"] = (done_total - previous["done_total"]) / span
                    row["done_total"] = done_total
                    samples.append(row)
                    previous = row
                    log(
                        f"{row['minute']:6.2f} min  table {row['table_bytes'] / 2**20:7.1f} MiB"
                        f"  indexes {row['index_bytes'] / 2**20:7.1f} MiB  dead {row['dead']:>8}"
                        f"  backlog {row['backlog']:>7}  autovacuums {row['autovacuums']:>3}"
                        f"  vacuums {row['vacuums']:>4}"
                        f"  p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:7.1f} ms"
                        f"  finished {row.get('finished_per_s', 0):8,.0f}/s"
                    )
        finally:
            producer.kill()
            producer.wait()
            self.stop(workers)
        return {
            "meta": {
                "command": "python -m bench.soak " + " ".join(sys.argv[1:]),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                "workers": args.workers,
                "minutes": args.minutes,
                "settle_minutes": args.settle,
            },
            "drain_jobs_per_s": drain,
            "rate": rate,
            "samples": samples,
            "trends_after_settle": trends(samples, args.settle, args.minutes),
        }


def write_markdown(results: dict) -> str:
    lines = [
        f"Soak, {results['meta']['date']}: {results['rate']:,} jobs/s "
        + (
            f"(half of the measured drain, {results['drain_jobs_per_s']:,.0f} jobs/s) "
            if results["drain_jobs_per_s"]
            else ""
        )
        + f"for {results['meta']['minutes']} minutes, {results['meta']['workers']} workers.",
        "",
        "| minute | table (MiB) | indexes (MiB) | dead tuples | autovacuums | vacuums | backlog "
        "| finished (jobs/s) | probe p50 (ms) | probe p99 (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    samples = results["samples"]
    step = max(1, len(samples) // 20)
    for s in samples[step - 1 :: step]:
        lines.append(
            f"| {s['minute']:.1f} | {s['table_bytes'] / 2**20:.1f} | {s['index_bytes'] / 2**20:.1f}"
            f" | {s['dead']:,} | {s['autovacuums']} | {s.get('vacuums', 0)} | {s['backlog']:,}"
            f" | {s.get('finished_per_s', 0):,.0f} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} |"
        )
    lines += [
        "",
        f"Trend after minute {results['meta']['settle_minutes']} (the change of the "
        "Theil-Sen line over the stretch, against the median):",
        "",
    ]
    for name, change in results["trends_after_settle"].items():
        lines.append(f"- {name}: " + ("n/a" if change is None else f"{change:+.1%}"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=int, help="jobs/s (default: --fraction of the drain)")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--sample", type=float, default=30, help="seconds between samples")
    parser.add_argument("--probe-gap", type=float, default=0.1, help="seconds between probes")
    parser.add_argument("--settle", type=float, default=10, help="minutes before the trend")
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--out", help="output directory (default: bench-results/soak-<time>)")
    parser.add_argument("--report", metavar="JSON", help="only rewrite an earlier run's Markdown")
    args = parser.parse_args(argv)
    if args.report:
        results = json.loads(Path(args.report).read_text())
        meta = results["meta"]
        results["trends_after_settle"] = trends(
            results["samples"], meta["settle_minutes"], meta["minutes"]
        )
        Path(args.report).write_text(json.dumps(results, indent=2))
        markdown = write_markdown(results)
        Path(args.report).with_suffix(".md").write_text(markdown)
        print(markdown)
        return 0
    server = args.url
    if not server:
        from bench.run import make_durable
        from testproject import throwaway_pg

        server = throwaway_pg.start()
        make_durable(server)
    soak = Soak(args, server)
    results = soak.run()
    (soak.out / "results.json").write_text(json.dumps(results, indent=2))
    markdown = write_markdown(results)
    (soak.out / "results.md").write_text(markdown)
    print(markdown)
    log(f"wrote {soak.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
