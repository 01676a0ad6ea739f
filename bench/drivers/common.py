"""Shared pieces of the drivers."""

from __future__ import annotations

import json
import os
import random
import sys
import time


def database_url() -> str:
    return os.environ["BENCH_DATABASE_URL"]


def wait_for_go() -> None:
    """Block until the harness writes a line: every producer starts at once."""
    print("ready", flush=True)
    sys.stdin.readline()


def report(**values) -> None:
    print(json.dumps(values), flush=True)


def sleep_seconds(index: int) -> float:
    """2-5 ms, spread evenly (mean 3.5 ms)."""
    return 0.002 + (index % 4) * 0.001


def record_latency(sent: float) -> None:
    delay = time.time() - sent
    path = os.environ.get("BENCH_LATENCY_FILE")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{delay:.6f}\n")


def timed_loop(n: int, enqueue_one) -> None:
    wait_for_go()
    start = time.time()
    for _ in range(n):
        enqueue_one()
    report(start=start, end=time.time())


def timed_bulk(enqueue_all) -> None:
    """Run one bulk enqueue; report its duration and when it committed (wall clock)."""
    start = time.perf_counter()
    enqueue_all()
    report(seconds=time.perf_counter() - start, end=time.time())


def gaps(n: int, mean: float) -> list[float]:
    """The pauses between the latency measurement's jobs: ``mean`` on average, spread over
    0.75x-1.25x, the same seeded sequence for every system. A fixed rhythm can line up with a
    system's own timers (django-pgjobs' echo claim 20 ms after a wake did, with jobs 20 ms
    apart); users' jobs do not arrive on a beat."""
    pick = random.Random(n)
    return [pick.uniform(0.75 * mean, 1.25 * mean) for _ in range(n)]


def percentile(values: list[float], pct: float) -> float:
    """``pct`` percentile of sorted ``values``, interpolated between the two nearest."""
    if not values:
        return float("nan")
    k = (len(values) - 1) * pct / 100
    low, high = int(k), min(int(k) + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


def latency_loop(n: int, gap: float, enqueue_one) -> None:
    for pause in gaps(n, gap):
        enqueue_one(time.time())
        time.sleep(pause)
    report(done=n)
