"""Run the benchmark: ``python -m bench`` (or ``python bench/run.py``) from the repository root.

Starts a private throwaway PostgreSQL (testproject/throwaway_pg.py) and switches it to durable
commits (fsync, full_page_writes, synchronous_commit on: the server defaults); a server given by
``DATABASE_URL`` is used as it is (its settings are recorded, never changed). Gives every system
its own database on that one server and measures each installed system in turn with the same
jobs and the same clock. Every number (throughput, latency percentiles, the raw-SQL limit, the
claim cost) is the median of ``--repeat`` runs (3 by default). Writes ``results.json`` (every
sample) and ``results.md`` (the tables) to a directory of its own under ``bench-results/`` at
the repository root (git-ignored; ``--out`` chooses another): bench/README.md.

    python -m bench                  # full run (see docs/benchmarks.md for how long it takes)
    python -m bench --quick          # smaller N, 500,000 history rows instead of 5 million
    python -m bench --systems pgjobs,pgqueuer --only drain,latency
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench import sqlbench  # noqa: E402
from bench.drivers.common import percentile, read_report  # noqa: E402
from bench.report import write_reports  # noqa: E402

# Per system: the package that must be importable, how to count unfinished jobs, how to empty
# the queue between runs, and each one's best settings (found by trying; see docs/benchmarks.md).
# Every worker option is spelled out here: a driver given no options starts the system with its
# documented defaults, which is what the "no flags" drain rows measure.
SYSTEMS: dict[str, dict] = {
    "pgjobs": {
        "label": "django-pgjobs",
        "package": "django_pgjobs",
        "remaining": "SELECT count(*) FROM (SELECT FROM pgjobs_job "
        "WHERE status IN ('ready', 'running') LIMIT 1) AS left_",
        "reset": "TRUNCATE pgjobs_job, pgjobs_deadletter, pgjobs_worker",
        # tuned by trying, idle 2-core machine, medians of 3 (1 · 2 processes, jobs/s): c2 b200
        # p400 21.5k · 35.0k; c2 b500 p1000 26.3k · 41.5k; c1 b500 p1000 27.1k · 42.0k; this one
        # 34.1k · 49.2k (the tuning runs of 2026-11-23: bench/results/2026-11-23-tuning.md at
        # commit cdfb214, the last with bench/results/)
        "drain": ["--concurrency", "1", "--batch", "1000", "--prefetch", "2000"],
        "sleepy": ["--concurrency", "32"],  # the shape's parallelism; the rest, defaults
        # the same jobs as async def, 32 at once on one event loop (one executor thread idle)
        "sleepy_async": ["--concurrency", "1", "--async-concurrency", "32", "--batch", "50"],
        "latency": ["--concurrency", "4", "--batch", "10", "--prefetch", "0"],
        "poll": ["--concurrency", "4", "--batch", "10", "--prefetch", "0", "--poll", "1"],
    },
    "pgqueuer": {
        "label": "PgQueuer",
        "package": "pgqueuer",
        "remaining": "SELECT count(*) FROM (SELECT FROM pgqueuer "
        "WHERE status IN ('queued', 'picked') LIMIT 1) AS left_",
        "reset": "TRUNCATE pgqueuer, pgqueuer_log",
        # tuned the same way: batch 100 18.0k · 24.6k; 200 21.1k · 25.3k; 500 22.4k · 26.6k;
        # 1000 21.3k · 28.7k
        "drain": ["--batch", "1000"],
        # PgQueuer wants max_concurrent_tasks >= 2 x batch: 32 in flight, batches of 16
        "sleepy": ["--concurrency", "32", "--batch", "16"],
        "latency": ["--batch", "10"],
        "poll": None,  # PgQueuer always listens; no poll-only mode
    },
    "procrastinate": {
        "label": "Procrastinate",
        "package": "procrastinate",
        "remaining": "SELECT count(*) FROM (SELECT FROM procrastinate_jobs "
        "WHERE status IN ('todo', 'doing') LIMIT 1) AS left_",
        "reset": "TRUNCATE procrastinate_jobs CASCADE",
        "drain": ["--concurrency", "10", "--interval", "0.1"],
        "sleepy": ["--concurrency", "32", "--interval", "0.1"],
        "latency": ["--concurrency", "1"],
        "poll": ["--concurrency", "1", "--poll", "1"],
    },
    "tasksdb": {
        "label": "django-tasks-db",
        "package": "django_tasks_db",
        "remaining": "SELECT count(*) FROM (SELECT FROM django_tasks_database_dbtaskresult "
        "WHERE status IN ('READY', 'RUNNING') LIMIT 1) AS left_",
        "reset": "TRUNCATE django_tasks_database_dbtaskresult",
        "drain": ["--interval", "0.1"],
        "sleepy": ["--interval", "0.1"],  # one task at a time per process
        "latency": None,  # polling only
        "poll": ["--interval", "1"],
    },
    "celery": {
        "label": "Celery (Redis broker)",
        "package": "celery",
        "remaining": None,  # counted by the driver through Redis
        "reset": None,
        "drain": ["--concurrency", "1"],
        "sleepy": ["--concurrency", "32"],
        "latency": ["--concurrency", "1"],
        "poll": None,
    },
}

# Mean pause between the latency measurement's jobs (spread: drivers/common.py gaps()).
LISTEN_GAP_SECONDS = 0.02
POLL_GAP_SECONDS = 0.137

SIZES = {
    # name: (full, quick)
    "enqueue": (3000, 600),
    "bulk": (50_000, 10_000),
    "drain_fast": (30_000, 6000),  # systems that drain > 2k jobs/s
    "drain_medium": (10_000, 2000),  # Celery
    "drain_slow": (1500, 400),
    "bulk_slow": (5000, 1000),  # systems without a bulk statement (one write per job)
    "sleepy": (6000, 1500),
    "latency": (150, 60),
    "latency_poll": (40, 15),
    "history": (5_000_000, 500_000),
}
SLOW = {"procrastinate", "tasksdb"}
# Measurements of django-pgjobs taken again with notifications off right after each run with
# them on, under the same load: key of the "on" figure -> key of the "off" one.
NOTIFY_OFF = {"enqueue_8": "enqueue_8_nonotify", "enqueue_8_atomic": "enqueue_8_atomic_nonotify"}
DRAIN_SIZE = {"pgjobs": "drain_fast", "pgqueuer": "drain_fast", "celery": "drain_medium"}


class Bench:
    def __init__(self, args: argparse.Namespace, server_url: str) -> None:
        self.args = args
        self.quick = args.quick
        self.repeat = args.repeat
        self.server_url = server_url
        self.results: dict = {"systems": {}, "raw_sql": {}, "claim_cost": {}, "notify": {}}
        self.tmp = Path(tempfile.mkdtemp(prefix="pgjobs-bench-"))
        self._watchers: dict[str, psycopg.Connection] = {}  # see remaining()

    def size(self, name: str) -> int:
        full, quick = SIZES[name]
        return quick if self.quick else full

    # -- plumbing -------------------------------------------------------------------------------

    def url(self, system: str) -> str:
        base, _, _ = self.server_url.rpartition("/")
        return f"{base}/bench_{system}"

    def env(self, system: str, **extra: str) -> dict[str, str]:
        env = {**os.environ, "BENCH_DATABASE_URL": self.url(system), "PYTHONPATH": str(ROOT)}
        env.update(extra)
        return env

    def driver(self, system: str, *args: str, env: dict | None = None, timeout=600) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", f"bench.drivers.{system}", *args],
            cwd=ROOT,
            env=env or self.env(system),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{system} {args}: exit {out.returncode}\n{out.stderr[-3000:]}")
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    @contextlib.contextmanager
    def held_driver(self, system: str, *args: str, timeout: float = 600):
        """A driver command whose report is read while the process is still alive (BENCH_HOLD):
        the caller times what follows the report without the producer's exit in it. Timing
        from ``end`` to after ``subprocess.run`` returned counted the interpreter's exit,
        0.3 s, which at 6,000 jobs was longer than the drain itself."""
        proc = subprocess.Popen(
            [sys.executable, "-m", f"bench.drivers.{system}", *args],
            cwd=ROOT,
            env=self.env(system, BENCH_HOLD="1"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield read_report(proc, f"{system} {args}", timeout)
        finally:
            proc.communicate("go\n", timeout=60)

    def sql(self, system: str, statement: str):
        with psycopg.connect(self.url(system), autocommit=True) as conn:
            return (
                conn.execute(statement).fetchall()
                if statement.lstrip().upper().startswith("SELECT")
                else conn.execute(statement)
            )

    def remaining(self, system: str) -> int:
        """0 once every job is done. The SQL systems answer 1 while any is left (a LIMIT 1
        probe): counting a churning table every 20 ms took a core's worth of CPU from the
        2-core machine being measured. Celery's count comes from Redis."""
        spec = SYSTEMS[system]
        if spec["remaining"] is None:  # Celery: counted in Redis (see bench/drivers/celery.py)
            import redis

            client = redis.Redis.from_url("redis://127.0.0.1:6379/9")
            expected, done = client.mget("bench:expected", "bench:done")
            return int(expected or 0) - int(done or 0)
        # One connection per system, kept: a new one every 20 ms would fork a PostgreSQL backend
        # 50 times a second on the machine being measured.
        conn = self._watchers.get(system)
        if conn is None or conn.closed:
            conn = self._watchers[system] = psycopg.connect(self.url(system), autocommit=True)
        return conn.execute(spec["remaining"]).fetchone()[0]

    def reset(self, system: str) -> None:
        spec = SYSTEMS[system]
        if spec["reset"] is None:
            self.driver(system, "reset")
        else:
            with psycopg.connect(self.url(system), autocommit=True) as conn:
                conn.execute(spec["reset"])
                if self.args.analyze_after_reset:
                    # The queue as it looks after an idle spell: analyzed while empty. Plans
                    # cached from these statistics (prepared statements, PL/pgSQL functions)
                    # then meet the next burst; docs/benchmarks.md shows what that does.
                    conn.execute("VACUUM ANALYZE")

    def start_workers(
        self, system: str, count: int, options: list[str], wait: bool = True, **env: str
    ):
        workers = []
        for index in range(count):
            log = open(self.tmp / f"{system}-worker-{index}.log", "w")  # noqa: SIM115
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", f"bench.drivers.{system}", "worker", *options],
                    cwd=ROOT,
                    env=self.env(system, **env),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        if not wait:
            return workers
        time.sleep(3.0 + count)  # start-up (imports, connections) is not measured
        for worker in workers:
            if worker.poll() is not None:
                raise RuntimeError(f"{system} worker exited: see {self.tmp}")
        return workers

    def stop_workers(self, workers) -> None:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)

    def wait_empty(self, system: str, timeout: float, interval: float = 0.02) -> float:
        deadline = time.time() + timeout
        while self.remaining(system) > 0:
            if time.time() > deadline:
                raise RuntimeError(f"{system}: jobs left after {timeout}s")
            time.sleep(interval)
        return time.time()

    def median(self, measure, repeat: int | None = None) -> dict:
        samples = [measure() for _ in range(repeat or self.repeat)]
        return {"median": statistics.median(samples), "samples": samples}

    # -- measurements ---------------------------------------------------------------------------

    def enqueue_rate(
        self, system: str, producers: int, command: str = "enqueue", **env: str
    ) -> float:
        """Jobs/s of ``producers`` processes enqueueing one job per transaction: autocommit
        (``enqueue``) or each job in its own ``transaction.atomic()`` block (``enqueue-atomic``)."""
        n = self.size("enqueue") // (2 if system in SLOW else 1)
        per = n // producers
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", f"bench.drivers.{system}", command, str(per)],
                cwd=ROOT,
                env=self.env(system, **env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(producers)
        ]
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            reports.append(json.loads(out.strip().splitlines()[-1]))
        self.reset(system)
        return per * producers / (max(r["end"] for r in reports) - min(r["start"] for r in reports))

    def bulk_rate(self, system: str) -> float:
        n = self.size("bulk_slow" if system in ("tasksdb", "celery") else "bulk")
        seconds = self.driver(system, "bulk", str(n))["seconds"]
        self.reset(system)
        return n / seconds

    def drain_rate(
        self, system: str, processes: int, options: list[str], sleepy=False, command=None
    ) -> float:
        if sleepy:
            n = self.size("sleepy") // (3 if system in SLOW else 1)
        else:
            n = self.size(DRAIN_SIZE.get(system, "drain_slow"))
        command = command or ("bulk-sleep" if sleepy else "bulk")
        if SYSTEMS[system]["remaining"] is None:
            return self.drain_rate_unbatched(system, processes, options, command, n)
        workers = self.start_workers(system, processes, options)
        try:
            with self.held_driver(system, command, str(n)) as report:
                committed = report["end"]
                finished = self.wait_empty(system, timeout=600, interval=0.005)
        finally:
            self.stop_workers(workers)
        self.reset(system)
        return n / (finished - committed)

    def drain_rate_unbatched(self, system, processes, options, command, n) -> float:
        """For a broker without transactions (Celery): its "bulk" publishes job by job, and
        workers would start on the first jobs during the publish. Publish first, start the
        workers, and time from the first finished job to the last."""
        self.driver(system, command, str(n))
        workers = self.start_workers(system, processes, options, wait=False)
        try:
            deadline = time.time() + 120
            while (left := self.remaining(system)) == n:
                if time.time() > deadline:
                    raise RuntimeError(f"{system}: workers did not start")
                time.sleep(0.02)
            started, at_start = time.time(), left
            finished = self.wait_empty(system, timeout=600)
        finally:
            self.stop_workers(workers)
        self.reset(system)
        return at_start / (finished - started)

    def latency(self, system: str, options: list[str], poll: bool) -> dict:
        n = self.size("latency_poll" if poll else "latency")
        gap = POLL_GAP_SECONDS if poll else LISTEN_GAP_SECONDS
        path = self.tmp / f"{system}-latency-{'poll' if poll else 'listen'}.txt"
        path.unlink(missing_ok=True)
        workers = self.start_workers(system, 1, options, BENCH_LATENCY_FILE=str(path))
        try:
            self.driver(
                system, "latency", str(n), str(gap), env=self.env(system, BENCH_LATENCY_FILE="")
            )
            self.wait_empty(system, timeout=120)
            time.sleep(0.3)
        finally:
            self.stop_workers(workers)
        self.reset(system)
        delays = sorted(float(line) for line in path.read_text().split())
        return {
            "p50_ms": 1000 * percentile(delays, 50),
            "p99_ms": 1000 * percentile(delays, 99),
            "samples": len(delays),
        }

    # -- the run --------------------------------------------------------------------------------

    def steps(self, system: str) -> list[tuple[str, object]]:
        spec = SYSTEMS[system]
        steps = [
            ("enqueue_1", lambda: self.enqueue_rate(system, 1)),
            ("enqueue_8", lambda: self.enqueue_rate(system, 8)),
            ("bulk", lambda: self.bulk_rate(system)),
            ("drain_defaults_1", lambda: self.drain_rate(system, 1, [])),
            ("drain_defaults_2", lambda: self.drain_rate(system, 2, [])),
            ("drain_1", lambda: self.drain_rate(system, 1, spec["drain"])),
            ("drain_2", lambda: self.drain_rate(system, 2, spec["drain"])),
            ("sleepy", lambda: self.drain_rate(system, 1, spec["sleepy"], sleepy=True)),
        ]
        if system == "pgjobs":  # the README's pattern; only django-pgjobs can turn NOTIFY off
            steps.insert(
                2, ("enqueue_8_atomic", lambda: self.enqueue_rate(system, 8, "enqueue-atomic"))
            )
            steps.append(
                (
                    "sleepy_async",
                    lambda: self.drain_rate(
                        system, 1, spec["sleepy_async"], sleepy=True, command="bulk-sleep-async"
                    ),
                )
            )
        if spec["latency"] is not None:
            steps.append(("latency_listen", lambda: self.latency(system, spec["latency"], False)))
        if spec["poll"] is not None:
            steps.append(("latency_poll", lambda: self.latency(system, spec["poll"], True)))
        only = self.args.only
        return [step for step in steps if not only or any(step[0].startswith(o) for o in only)]

    def run_interleaved(self, systems: list[str]) -> None:
        """Measurement by measurement, each repetition going round every system, so that the
        machine's noise (other processes on 2 cores) falls on all of them alike."""
        plan = {system: self.steps(system) for system in systems}
        names = []
        for system in systems:
            for name, _ in plan[system]:
                if name not in names:
                    names.append(name)
        for name in names:
            samples: dict[str, list] = {}
            errors: dict[str, str] = {}
            for rep in range(self.repeat):
                for system in systems:
                    step = next((s for s in plan[system] if s[0] == name), None)
                    if step is None or system in errors:
                        continue
                    started = time.time()
                    try:
                        samples.setdefault(system, []).append(step[1]())
                        if system == "pgjobs" and name in NOTIFY_OFF:
                            # notifications off, right after on: the same load for both
                            command = "enqueue-atomic" if "atomic" in name else "enqueue"
                            off = self.enqueue_rate(system, 8, command, BENCH_NOTIFY="0")
                            samples.setdefault("pgjobs:nonotify", []).append(off)
                            log(f"   {NOTIFY_OFF[name]} pgjobs #{rep + 1}: {_short(off)}")
                    except Exception as error:  # noqa: BLE001 - one failure must not end the run
                        errors[system] = str(error)[-500:]
                        log(f"   {name} {system}: ERROR {errors[system]}")
                        continue
                    log(
                        f"   {name} {system} #{rep + 1}: {_short(samples[system][-1])} "
                        f"({time.time() - started:.0f}s)"
                    )
            if "pgjobs:nonotify" in samples:
                values = samples.pop("pgjobs:nonotify")
                self.results["systems"]["pgjobs"][NOTIFY_OFF[name]] = {
                    "median": statistics.median(values),
                    "samples": values,
                }
            for system in systems:
                result = self.results["systems"][system]
                if system in errors:
                    result[name] = {"error": errors[system]}
                elif system in samples:
                    values = samples[system]
                    if isinstance(values[0], dict):  # latency: each percentile's median
                        median = {k: statistics.median(v[k] for v in values) for k in values[0]}
                    else:
                        median = statistics.median(values)
                    result[name] = {"median": median, "samples": values}

    def run(self) -> dict:
        ready = []
        for system in self.args.systems:
            spec = SYSTEMS[system]
            entry = {"label": spec["label"]}
            self.results["systems"][system] = entry
            if importlib.util.find_spec(spec["package"]) is None:
                entry["skipped"] = "not installed (pip install -e '.[bench]')"
            elif system == "celery" and not redis_reachable():
                entry["skipped"] = "no Redis on 127.0.0.1:6379"
            else:
                recreate_database(self.server_url, f"bench_{system}")
                self.driver(system, "setup")
                self.reset(system)
                ready.append(system)
        log(f"systems: {', '.join(ready)}")
        self.run_interleaved(ready)
        systems = ready
        if "pgjobs" in systems and (not self.args.only or "raw" in self.args.only):
            log("== raw SQL limit (claim + acknowledge statements alone, psycopg)")
            self.results["raw_sql"] = sqlbench.raw_limit(
                self.url("pgjobs"), self.quick, self.repeat
            )
            log(f"   {self.results['raw_sql']}")
        if "latency_listen" in self.results["systems"].get("pgjobs", {}):  # beside it, alike
            log("== latency floor (INSERT + NOTIFY -> LISTEN -> claim, psycopg, 2 processes)")
            self.results["latency_floor"] = sqlbench.latency_floor(
                self.url("pgjobs"), self.size("latency"), LISTEN_GAP_SECONDS, self.repeat
            )
            log(f"   {self.results['latency_floor']}")
        if "pgjobs" in systems and (not self.args.only or "notify" in self.args.only):
            log("== NOTIFY at commit, 8 producers (one job per transaction, psycopg)")
            self.results["notify"] = sqlbench.notify_cost(
                self.url("pgjobs"), self.quick, self.repeat
            )
            log(f"   {self.results['notify']}")
        if "pgjobs" in systems and (not self.args.only or "claim" in self.args.only):
            log("== claim cost with history")
            self.results["claim_cost"] = sqlbench.claim_cost(
                self.url("pgjobs"), self.size("history"), log, self.repeat
            )
            log(f"   {self.results['claim_cost']}")
        return self.results


def _short(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v:.1f}" for k, v in value.items())
    return f"{value:,.0f}"


def redis_reachable() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def recreate_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def django_database(server_url: str | None, name: str, results: str) -> tuple[str, str, dict, Path]:
    """For a measurement run in child processes: the server (``server_url``, or a throwaway
    server with durable commits when None), the database ``name`` made anew on it and its URL,
    the environment that sets Django up on it (``bench.pgjobs_settings``) and a new folder
    ``bench-results/<results>-<UTC time>/``."""
    root = Path(__file__).resolve().parent.parent
    if not server_url:
        from testproject import throwaway_pg

        server_url = throwaway_pg.start()
        make_durable(server_url)
    base, _, _ = server_url.rpartition("/")
    url = f"{base}/{name}"
    out = root / "bench-results" / time.strftime(f"{results}-%Y-%m-%dT%H%MZ", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    recreate_database(server_url, name)
    env = {
        **os.environ,
        "BENCH_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench.pgjobs_settings",
        "PYTHONPATH": str(root),
    }
    return server_url, url, env, out


DURABLE = ("fsync", "full_page_writes", "synchronous_commit")


def make_durable(server_url: str) -> None:
    """The throwaway server runs with fsync off for the tests; benchmark with durable commits.
    Only for the server this run started: a server given by DATABASE_URL is never changed."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        for setting in DURABLE:
            conn.execute(f"ALTER SYSTEM SET {setting} = on")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)


def server_settings(server_url: str) -> dict:
    names = ("server_version", *DURABLE, "shared_buffers", "max_connections")
    with psycopg.connect(server_url, autocommit=True) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per number (median)")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {','.join(SYSTEMS)}"
    )
    parser.add_argument("--only", default="", help="measurement name prefixes, comma-separated")
    parser.add_argument(
        "--analyze-after-reset",
        action="store_true",
        help="VACUUM ANALYZE the emptied tables between measurements (an idle queue meeting a "
        "burst)",
    )
    parser.add_argument(
        "--out",
        help="output directory (default: bench-results/<UTC start time>, git-ignored)",
    )
    parser.add_argument(
        "--report", metavar="JSON", help="only rewrite the Markdown of an earlier run's JSON"
    )
    args = parser.parse_args(argv)
    if args.report:
        results = json.loads(Path(args.report).read_text())
        markdown = write_reports(results)
        Path(args.report).with_suffix(".md").write_text(markdown)
        print(markdown)
        return 0
    args.systems = [s for s in args.systems.split(",") if s]
    args.only = [s for s in args.only.split(",") if s]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")

    started = time.time()
    if os.environ.get("DATABASE_URL"):
        server_url = os.environ["DATABASE_URL"]
        log(f"using DATABASE_URL {server_url} as it is (its settings are not changed)")
        server = {**server_settings(server_url), "source": "DATABASE_URL, used as it is"}
        lax = [name for name in DURABLE if server[name] != "on"]
        if lax:
            log(f"warning: {', '.join(lax)} off on this server: commits are not durable")
    else:
        from testproject import throwaway_pg

        server_url = throwaway_pg.start()
        os.environ.pop("DATABASE_URL", None)  # drivers get BENCH_DATABASE_URL only
        log(f"started a throwaway PostgreSQL: {server_url}")
        make_durable(server_url)
        server = {**server_settings(server_url), "source": "throwaway, durable commits set"}
    log(f"server: {server}")
    bench = Bench(args, server_url)
    results = bench.run()
    results["meta"] = {
        "command": "python -m bench " + " ".join(argv),
        "commit": checked_out_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(time.time() - started),
        "quick": args.quick,
        "analyze_after_reset": args.analyze_after_reset,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "server": server,
        "versions": versions(),
    }
    # Results are not source: each run writes a directory of its own outside the package tree.
    out = Path(
        args.out or ROOT / "bench-results" / time.strftime("%Y-%m-%dT%H%MZ", time.gmtime(started))
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    markdown = write_reports(results)
    (out / "results.md").write_text(markdown)
    print(markdown)
    log(f"wrote {out / 'results.json'} and {out / 'results.md'} in {time.time() - started:.0f}s")
    return 0


def checked_out_commit() -> str:
    """The commit measured ("+changes" when the work tree differs from it), "" outside git."""
    try:
        head, changes = (
            subprocess.run(
                ["git", *command], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
            for command in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "-uno"])
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+changes" if changes else "")


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in (
        "django-pgjobs",
        "Django",
        "psycopg",
        "pgqueuer",
        "procrastinate",
        "django-tasks-db",
        "celery",
        "redis",
        "asyncpg",
    ):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
