"""Celery driver (Redis broker on 127.0.0.1:6379, database 9; no result backend).

Celery has no transactions with the application's database, so "one job per transaction" is one
publish. Completion is counted with one Redis INCR per task (Celery keeps no state to count).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from celery import Celery, group

from bench.drivers import common

BROKER = "redis://127.0.0.1:6379/9"
QUEUE = "pgjobs-bench"
app = Celery("bench", broker=BROKER)
app.conf.update(
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
)
_redis = redis.Redis.from_url(BROKER)


@app.task(name="noop")
def noop() -> None:
    _redis.incr("bench:done")


@app.task(name="nap")
def nap(seconds: float) -> None:
    time.sleep(seconds)
    _redis.incr("bench:done")


@app.task(name="timed")
def timed(sent: float) -> None:
    common.record_latency(sent)
    _redis.incr("bench:done")


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "worker":
        # no options: Celery's own defaults (prefork pool, one child per CPU, prefetch
        # multiplier 4); with --concurrency, the tuned pool and a deep prefetch
        tuned: list[str] = []
        while rest:
            flag = rest.pop(0)
            if flag == "--concurrency":
                concurrency = rest.pop(0)
                tuned = (
                    ["-P", "solo"] if concurrency == "1" else ["-P", "threads", "-c", concurrency]
                )
                tuned += ["--prefetch-multiplier", "100"]
        os.execv(
            sys.executable,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.drivers.celery",
                "worker",
                "-Q",
                QUEUE,
                *tuned,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "warning",
                "-n",
                f"bench{os.getpid()}@%h",
            ],
        )
    if command in ("setup", "reset"):
        _redis.delete(QUEUE, "bench:done", "bench:expected", "unacked", "unacked_index")
        common.report(done=True)
    elif command == "remaining":
        expected = int(_redis.get("bench:expected") or 0)
        common.report(remaining=expected - int(_redis.get("bench:done") or 0))
    elif command == "enqueue":
        n = int(rest[0])
        _redis.incrby("bench:expected", n)
        common.timed_loop(n, noop.delay)
    elif command in ("bulk", "bulk-sleep"):
        n = int(rest[0])
        _redis.incrby("bench:expected", n)
        if command == "bulk":
            common.timed_bulk(lambda: group(noop.s() for _ in range(n)).apply_async())
        else:
            common.timed_bulk(
                lambda: group(nap.s(common.sleep_seconds(i)) for i in range(n)).apply_async()
            )
    elif command == "latency":
        n, gap = int(rest[0]), float(rest[1])
        _redis.incrby("bench:expected", n)
        common.latency_loop(n, gap, lambda sent: timed.delay(sent))
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
