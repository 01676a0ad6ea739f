"""The ceiling: the most no-op jobs/s one PostgreSQL drains here with 1, 2, 4 and 8 ``runjobs``
processes (no flags), what gives out first, and a model of how it grows with cores.

    python -m bench.ceiling                              # 1,2,4,8 processes on every core
    python -m bench.ceiling --processes 2,4 --jobs 60000 --repeat 3
    python -m bench.ceiling --cores 1                    # the check: everything on one core

Each drain: the queue paused, ``--processes`` workers started and idle, ``--jobs`` no-op jobs
enqueued in one statement, then the clock read and the queue resumed (with a notification), and
the time taken until the queue is empty. Meanwhile, every 20 ms, the wait events of the database's backends are
sampled (``pg_stat_activity``). Around the drain: the CPU time of the workers and of every
PostgreSQL process (``/proc``), the machine's busy share (``/proc/stat``), the WAL written and
the commits (``pg_stat_database``). After each drain, the same jobs drained by the batched
SQL floor (``bench/floor.py``: ``pgbench`` with as many clients as the drain has processes, the
worker's statement shape and nothing else), unless ``--no-floor``. Medians of ``--repeat``.

The model. A job costs ``w`` CPU seconds in a worker process and ``g`` in PostgreSQL. A worker
process runs Python on one core at a time (the GIL), so ``P`` processes drain at most ``P / w``;
all of them and PostgreSQL share the machine's ``C`` cores, so at most ``C / (w + g)``:

    jobs/s  <=  min(P / w, C / (w + g))

``w`` and ``g`` are measured at each ``P`` (they grow with contention). ``--cores 1`` pins the
server and the workers to one core (``taskset``) and compares what was measured with what the
model, fed the 2-core run's ``w`` and ``g``, predicted. Results:
``bench-results/ceiling-<UTC time>/`` (``results.json``, ``results.md``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from bench import floor
from bench.drivers.common import read_report
from bench.run import recreate_database

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "pgjobs_ceiling"
HZ = os.sysconf("SC_CLK_TCK")

WAITS = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid() AND state = 'active'
GROUP BY 1
"""
COUNTERS = """
SELECT pg_current_wal_lsn(), xact_commit,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = %s)
FROM pg_stat_database WHERE datname = %s
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / HZ


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def pin(pids: list[int], cores: str) -> None:
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", cores, str(pid)], capture_output=True)


class Ceiling:
    def __init__(self, args: argparse.Namespace, server: str) -> None:
        self.args = args
        base, _, _ = server.rpartition("/")
        self.url = f"{base}/{DATABASE}"
        recreate_database(server, DATABASE)
        self.command("setup")
        self.cores = args.cores or os.cpu_count() or 1
        self.affinity = f"0-{self.cores - 1}"

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "BENCH_DATABASE_URL": self.url, "PYTHONPATH": str(ROOT), **extra}

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        prefix = ["taskset", "-c", self.affinity] if self.args.cores else []
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "bench.drivers.pgjobs", *args],
            cwd=ROOT,
            env=self.env(**kwargs.pop("env", {})),
            **kwargs,
        )

    def command(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "bench.drivers.pgjobs", *args],
            cwd=ROOT,
            env=self.env(),
            check=True,
            capture_output=True,
        )

    def set_paused(self, conn, paused: bool) -> None:
        """Pause or resume the bench's queue; a resume wakes the workers at once."""
        with conn.transaction():
            conn.execute(
                "INSERT INTO pgjobs_queue (name, paused, changed_at) VALUES ('default', %s, now()) "
                "ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()",
                (paused,),
            )
            if not paused:
                conn.execute("SELECT pg_notify('pgjobs', 'default')")

    def drain(self, processes: int) -> dict:
        with psycopg.connect(self.url, autocommit=True) as conn:
            self.set_paused(conn, True)  # the jobs wait until the clock runs
        workers = [
            self.popen("worker", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(processes)
        ]
        time.sleep(3 + processes)
        if self.args.cores:
            pin(postgres_pids(), self.affinity)  # the backends the workers opened too
        waits: collections.Counter = collections.Counter()
        samples = 0
        done = threading.Event()
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                producer = self.popen(
                    "bulk",
                    str(self.args.jobs),
                    env={"BENCH_HOLD": "1"},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                read_report(producer, "the bulk enqueue")
                wal0, commits0, connections = conn.execute(
                    COUNTERS, (DATABASE, DATABASE)
                ).fetchone()
                pg_pids = postgres_pids()
                cpu0 = sum(process_cpu(w.pid) for w in workers)
                pg0 = sum(process_cpu(p) for p in pg_pids)
                busy0 = busy_ticks()

                def sample() -> None:
                    nonlocal samples
                    with psycopg.connect(self.url, autocommit=True) as watcher:
                        while not done.wait(0.02):
                            for event, count in watcher.execute(WAITS, (DATABASE,)):
                                waits[event] += count
                            samples += 1

                sampler = threading.Thread(target=sample)
                sampler.start()
                # The clock starts before the queue is resumed: a harness or producer that waits
                # for a core among busy workers only makes the drain look slower. (Timed from the
                # producer's commit, 8 busy workers on 2 cores kept the producer from reading
                # the clock until most jobs were done: 3.7 million jobs/s.)
                committed = time.time()
                self.set_paused(conn, False)
                while conn.execute("SELECT 1 FROM pgjobs_job LIMIT 1").fetchone():
                    time.sleep(0.005)
                finished = time.time()
                done.set()
                sampler.join()
                cpu1 = sum(process_cpu(w.pid) for w in workers)
                pg1 = sum(process_cpu(p) for p in postgres_pids() if p in pg_pids)
                busy1 = busy_ticks()
                wal, commits = conn.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s), xact_commit - %s "
                    "FROM pg_stat_database WHERE datname = %s",
                    (wal0, commits0, DATABASE),
                ).fetchone()
                producer.communicate("go\n", timeout=60)
                conn.execute("TRUNCATE pgjobs_job")
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(30)
        n, seconds = self.args.jobs, finished - committed
        active = sum(waits.values()) or 1
        return {
            "jobs_per_s": n / seconds,
            "worker_cpu_us_per_job": (cpu1 - cpu0) / n * 1e6,
            "postgres_cpu_us_per_job": (pg1 - pg0) / n * 1e6,
            "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
            "wal_bytes_per_job": float(wal) / n,
            "wal_mb_per_s": float(wal) / seconds / 2**20,
            "commits_per_s": commits / seconds,
            "connections": connections,
            "active_backends": sum(waits.values()) / max(1, samples),
            "waits": {event: count / active for event, count in waits.most_common(6)},
        }

    def run(self) -> dict:
        results = {}
        for processes in self.args.processes:
            runs, floors = [], []
            for _ in range(self.args.repeat):
                runs.append(self.drain(processes))
                log(
                    f"{processes} processes: {runs[-1]['jobs_per_s']:,.0f} jobs/s, busy "
                    f"{runs[-1]['machine_busy']:.0%}, waits {runs[-1]['waits']}"
                )
                if self.args.floor:  # alternating with the drain, the same jobs and clock
                    prefix = ["taskset", "-c", self.affinity] if self.args.cores else None
                    floors.append(floor.drain(self.url, self.args.jobs, processes, prefix))
                    log(f"{processes} pgbench clients: {floors[-1]['jobs_per_s']:,.0f} jobs/s")
            median = statistics.median(r["jobs_per_s"] for r in runs)
            middle = min(runs, key=lambda r: abs(r["jobs_per_s"] - median))
            results[processes] = {**middle, "samples": [r["jobs_per_s"] for r in runs]}
            if floors:
                results[processes]["floor_jobs_per_s"] = statistics.median(
                    f["jobs_per_s"] for f in floors
                )
                results[processes]["floor_samples"] = [f["jobs_per_s"] for f in floors]
        return results


def model(w_us: float, g_us: float, processes: int, cores: int) -> float:
    """jobs/s the model allows: min(P / w, C / (w + g))."""
    w, g = w_us / 1e6, g_us / 1e6
    return min(processes / w, cores / (w + g))


def write_markdown(results: dict) -> str:
    lines = [
        f"Ceiling, {results['meta']['date']}, {results['meta']['cores']} core(s), "
        f"{results['meta']['jobs']:,} no-op jobs per drain, medians of {results['meta']['repeat']}:",
        "",
        "| processes | jobs/s | machine busy | worker CPU (µs/job) | PostgreSQL CPU (µs/job) "
        "| WAL (B/job) | WAL (MB/s) | commits/s | active backends | top wait events "
        "| model (jobs/s) | SQL floor (jobs/s) | drain ÷ floor |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for processes, r in results["runs"].items():
        waits = ", ".join(f"{k} {v:.0%}" for k, v in list(r["waits"].items())[:3])
        predicted = model(
            r["worker_cpu_us_per_job"],
            r["postgres_cpu_us_per_job"],
            int(processes),
            results["meta"]["cores"],
        )
        lines.append(
            f"| {processes} | {r['jobs_per_s']:,.0f} | {r['machine_busy']:.0%} "
            f"| {r['worker_cpu_us_per_job']:.1f} | {r['postgres_cpu_us_per_job']:.1f} "
            f"| {r['wal_bytes_per_job']:.0f} | {r['wal_mb_per_s']:.1f} | {r['commits_per_s']:,.0f} "
            f"| {r['active_backends']:.1f} | {waits} | {predicted:,.0f} "
            + (
                f"| {r['floor_jobs_per_s']:,.0f} | {r['jobs_per_s'] / r['floor_jobs_per_s']:.0%} |"
                if "floor_jobs_per_s" in r
                else "| | |"
            )
        )
    check = results.get("check")
    if check:
        lines += ["", "The model checked on another core count:", ""]
        lines += [
            "| processes | predicted (jobs/s) | measured (jobs/s) | measured ÷ predicted |",
            "|---:|---:|---:|---:|",
        ]
        for processes, row in check.items():
            lines.append(
                f"| {processes} | {row['predicted']:,.0f} | {row['measured']:,.0f} "
                f"| {row['measured'] / row['predicted']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ceiling", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cores", type=int, help="pin everything to this many cores")
    parser.add_argument(
        "--predict-from",
        metavar="JSON",
        help="an earlier run's results.json: compare this run with what its w and g predict",
    )
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the batched SQL floor (pgbench, bench/floor.py) run beside each drain",
    )
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    args.processes = [int(p) for p in args.processes.split(",")]
    server = args.url
    if not server:
        from bench.run import make_durable
        from testproject import throwaway_pg

        server = throwaway_pg.start()
        make_durable(server)
    started = time.time()
    ceiling = Ceiling(args, server)
    try:
        runs = ceiling.run()
    finally:
        if args.cores:
            pin(postgres_pids(), f"0-{(os.cpu_count() or 1) - 1}")
    results = {
        "meta": {
            "command": "python -m bench.ceiling " + " ".join(argv or sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "cores": ceiling.cores,
            "jobs": args.jobs,
            "repeat": args.repeat,
        },
        "runs": {str(k): v for k, v in runs.items()},
    }
    if args.predict_from:
        earlier = json.loads(Path(args.predict_from).read_text())["runs"]
        results["check"] = {
            key: {
                "predicted": model(
                    earlier[key]["worker_cpu_us_per_job"],
                    earlier[key]["postgres_cpu_us_per_job"],
                    int(key),
                    ceiling.cores,
                ),
                "measured": run["jobs_per_s"],
            }
            for key, run in results["runs"].items()
            if key in earlier
        }
    out = Path(
        args.out
        or ROOT / "bench-results" / time.strftime("ceiling-%Y-%m-%dT%H%MZ", time.gmtime(started))
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    markdown = write_markdown(results)
    (out / "results.md").write_text(markdown)
    print(markdown)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
