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


def record_probe(sent: float) -> None:
    """The soak's probe: when it started and its enqueue -> start delay (``BENCH_PROBE_FILE``).
    Small appends to one file from several workers do not interleave (O_APPEND)."""
    path = os.environ.get("BENCH_PROBE_FILE")
    if path:
        now = time.time()
        with open(path, "a") as handle:
            handle.write(f"{now:.6f} {now - sent:.6f}\n")


def paced_load(rate: int, seconds: float, probe_gap: float, enqueue_batch, enqueue_probe) -> None:
    """``rate`` jobs/s for ``seconds``: every 10 ms, ``enqueue_batch(n)`` with as many as keep
    the count on schedule from the start (at most one second's worth at once, when behind), and
    a probe every ``probe_gap`` seconds."""
    start = time.monotonic()
    sent = probes = 0
    next_probe = start
    while (now := time.monotonic()) - start < seconds:
        due = min(int(rate * (now - start)) - sent, rate)
        if due > 0:
            enqueue_batch(due)
            sent += due
        if now >= next_probe:
            enqueue_probe(time.time())
            probes += 1
            next_probe += probe_gap
        time.sleep(max(0.0, 0.01 - (time.monotonic() - now)))
    report(sent=sent, probes=probes, seconds=time.monotonic() - start)


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
    hold()


def read_report(proc, what: str, timeout: float = 600) -> dict:
    """(The harness.) The report a held driver (``BENCH_HOLD=1``, ``stdout`` piped, text) prints,
    read while it stays alive; the caller ends it with ``proc.communicate("go\\n")``."""
    line = ""
    deadline = time.time() + timeout
    while not line.startswith("{"):
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            errors = proc.stderr.read()[-3000:] if proc.stderr else ""
            raise RuntimeError(f"{what}: exit {proc.returncode}\n{errors}")
        if time.time() > deadline:
            raise RuntimeError(f"{what}: no report after {timeout}s")
    return json.loads(line)


def hold() -> None:
    """After a bulk enqueue's report, with ``BENCH_HOLD=1``: wait for a line on stdin before
    exiting. The drain measurement times commit -> empty queue while the producer is still
    alive, so the interpreter's exit (0.3 s here) is not counted as drain time."""
    if os.environ.get("BENCH_HOLD") == "1":
        sys.stdin.readline()


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
