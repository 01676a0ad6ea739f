"""Where enqueue -> start goes: one job at a time through a worker whose steps are stamped.

    python -m bench.latency_trace                  # 300 jobs, then the floor of the same run
    python -m bench.latency_trace --jobs 600 --url postgres://postgres@127.0.0.1:5432/postgres

A worker (the latency benchmark's options: ``--concurrency 4 --batch 10 --prefetch 0``) runs in
a process of its own with stamps (``time.time()``) at: the listener's wake-up of the
dispatcher (``Inbox.wake``), the dispatcher taking it (``Worker._handle``), the claim sent and
returned (``Claimer._claim``), every statement (``django_pgjobs.db``), and the handler running.
A producer process enqueues ``--jobs`` jobs with ``enqueue()``, 15-25 ms apart (the latency
benchmark's gaps), stamping the call and its return. Each job's steps are the stamps before its
start; a job a claim found without a fresh wake-up (an echo claim, 20 ms after a wake) is
counted in the total only. Then ``sqlbench.latency_floor`` on the same server: insert + notify,
then a durable ``SKIP LOCKED`` claim, psycopg alone. Medians, and p10 / p90.

The stamps patch the worker's internals: a measurement tool, to be kept in step with the
worker's names. Without ``--url`` a throwaway server with durable commits is started, as
``python -m bench`` does. Results: ``bench-results/latency-trace-<UTC time>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "pgjobs_latency_trace"
STEPS = (
    ("sent", "notified", "enqueue() called -> the listener has the notification"),
    ("notified", "dispatcher", "listener thread -> dispatcher thread"),
    ("dispatcher", "claim_sent", "dispatcher awake -> claim sent"),
    ("claim_sent", "claimed", "the claim's round trip"),
    ("claimed", "start", "claim returned -> handler running (executor thread)"),
    ("sent", "start", "enqueue() called -> handler running"),
)


def stamped_worker(jobs: int, out: str) -> None:
    """(Child process.) Run a worker with its steps stamped until ``jobs`` jobs ran."""
    import django

    django.setup()
    import bench.pgjobs_jobs as bench_jobs
    from django_pgjobs import db
    from django_pgjobs.worker import Worker, claiming, loop, outcomes

    events: list[list] = []

    def wrap(owner, name, before=None, after=None):
        original = getattr(owner, name)

        def stamped(*args, **kwargs):
            if before:
                before(*args)
            result = original(*args, **kwargs)
            if after:
                after(args, result)
            return result

        setattr(owner, name, stamped)

    wrap(outcomes.Inbox, "wake", before=lambda *a: events.append(["notified", time.time()]))
    wrap(
        loop.Worker,
        "_handle",
        before=lambda self, item: (
            item is outcomes.WAKE and events.append(["dispatcher", time.time()])
        ),
    )
    wrap(
        claiming.Claimer,
        "_claim",
        before=lambda *a: events.append(["claim_sent", time.time()]),
        after=lambda a, r: events.append(["claimed", time.time()]),
    )
    inside = threading.local()  # execute_prepared_replanned() calls execute_prepared(): once
    for name in ("execute", "execute_prepared", "execute_prepared_replanned"):
        original = getattr(db, name)

        def timed(connection, statement, *args, _original=original, **kwargs):
            if getattr(inside, "statement", False):
                return _original(connection, statement, *args, **kwargs)
            inside.statement, begun = True, time.time()
            try:
                return _original(connection, statement, *args, **kwargs)
            finally:
                inside.statement = False
                events.append([f"sql:{statement}", begun, time.time()])

        setattr(db, name, timed)
    bench_jobs.record_latency = lambda sent: events.append(["start", time.time(), sent])
    Worker(concurrency=4, batch_size=10, prefetch=0, max_jobs=jobs).run()
    Path(out).write_text(json.dumps(events))


def stamped_producer(jobs: int, out: str) -> None:
    """(Child process.) ``jobs`` enqueue() calls, the latency benchmark's gaps apart."""
    import django

    django.setup()
    import bench.pgjobs_jobs as bench_jobs
    from bench.drivers.common import gaps
    from bench.run import LISTEN_GAP_SECONDS

    calls = []
    for pause in gaps(jobs, LISTEN_GAP_SECONDS):
        sent = time.time()
        bench_jobs.timed.enqueue(sent)
        calls.append([sent, time.time()])
        time.sleep(pause)
    Path(out).write_text(json.dumps(calls))


def steps_of(events: list[list], calls: list[list], skip: int = 5) -> dict:
    """Each job's steps from the stamps before its start (the first ``skip`` jobs left out:
    connections warming up)."""
    returned = {round(sent, 6): back for sent, back in calls}
    last: dict[str, float] = {}
    jobs = []
    for event in events:
        if event[0] == "start":
            sent = event[2]
            job = {"sent": sent, "start": event[1], "returned": returned.get(round(sent, 6))}
            for name in ("notified", "dispatcher", "claim_sent", "claimed"):
                if last.get(name, 0) >= sent:  # woken for this job
                    job[name] = last[name]
            jobs.append(job)
        elif not event[0].startswith("sql:"):
            last[event[0]] = event[1]
    jobs = jobs[skip:]
    figures = {}
    for first, then, label in STEPS:
        values = sorted(1000 * (j[then] - j[first]) for j in jobs if first in j and then in j)
        if values:
            figures[label] = {
                "p50_ms": statistics.median(values),
                "p10_ms": values[len(values) // 10],
                "p90_ms": values[9 * len(values) // 10],
                "jobs": len(values),
            }
    statements: dict[str, list[float]] = {}
    for event in events:
        if event[0].startswith("sql:"):
            statements.setdefault(event[0][4:], []).append(1000 * (event[2] - event[1]))
    return {
        "steps": figures,
        "woken": sum(1 for j in jobs if "notified" in j),
        "jobs": len(jobs),
        "statements": {
            name: {"runs": len(v), "p50_ms": statistics.median(v)} for name, v in statements.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--role", choices=("worker", "producer"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "worker":
        stamped_worker(args.jobs, args.out)
        return 0
    if args.role == "producer":
        stamped_producer(args.jobs, args.out)
        return 0

    import psycopg

    from bench import sqlbench
    from bench.run import LISTEN_GAP_SECONDS, django_database, server_settings

    server, url, env, out = django_database(args.url, DATABASE, "latency-trace")
    this = [sys.executable, "-m", "bench.latency_trace", "--jobs", str(args.jobs)]
    worker = None
    try:
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        worker = subprocess.Popen(
            [*this, "--role", "worker", "--out", str(out / "worker.json")], cwd=ROOT, env=env
        )
        time.sleep(3)  # connected and listening
        subprocess.run(
            [*this, "--role", "producer", "--out", str(out / "producer.json")],
            cwd=ROOT,
            env=env,
            check=True,
        )
        worker.wait(60)
        events = json.loads((out / "worker.json").read_text())
        calls = json.loads((out / "producer.json").read_text())
        results = steps_of(events, calls)
        results["floor"] = sqlbench.latency_floor(url, args.jobs, LISTEN_GAP_SECONDS)
        results["server"] = server_settings(url)
    finally:
        # a worker left behind (the producer failed, or it did not finish in time) would retry
        # against the dropped database for ever and load the next benchmark
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    results["meta"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    for label, figure in results["steps"].items():
        print(
            f"{label:<58} p50 {figure['p50_ms']:6.3f}  "
            f"p10 {figure['p10_ms']:6.3f}  p90 {figure['p90_ms']:6.3f} ms  ({figure['jobs']} jobs)"
        )
    floor = results["floor"]
    print(
        f"floor: notification p50 {floor['notify_p50_ms']:.3f} ms, claim {floor['claim_p50_ms']:.3f}"
    )
    for name, figure in sorted(results["statements"].items(), key=lambda x: -x[1]["runs"])[:6]:
        print(f"  {name:<40} {figure['runs']:5d} runs, p50 {figure['p50_ms']:.3f} ms")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
