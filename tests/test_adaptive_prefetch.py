"""Adaptive prefetch, the default when ``prefetch`` is not given: short jobs are held and
acknowledged many at a time, a long (or not yet seen) job only for a free executor."""

from __future__ import annotations

import re
import signal
import time

import pytest
from helpers import FAST_LEASES, wait_until

from django_pgjobs.management.commands.runjobs import DEFAULT_CONCURRENCY
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.worker.holding import MAX_HELD, TARGET_SECONDS, AdaptivePrefetch
from testproject.demo import jobs as demo
from testproject.demo.models import Execution


def test_nothing_is_held_beyond_the_executors_before_a_duration_is_known():
    hold = AdaptivePrefetch()
    assert hold.prefetch(4) == 0
    hold.claimed("app.unseen")
    assert hold.is_long("app.unseen")
    assert hold.prefetch(4) == 0


def test_short_jobs_fill_the_target_of_expected_work_per_executor():
    hold = AdaptivePrefetch()
    hold.claimed("app.short")
    hold.observe("app.short", 0.01)
    assert hold.prefetch(4) == int(TARGET_SECONDS * 4 / 0.01)  # 40: 100 ms per executor
    hold.observe("app.tiny", 0.000_001)
    hold.claimed("app.tiny")
    assert hold.prefetch(4) == int(TARGET_SECONDS * 4 / 0.01)  # the slowest of the mix rules
    hold.last_claimed["app.short"] -= 60  # no longer in the mix
    assert hold.prefetch(4) == MAX_HELD - 4  # bounded


def test_a_long_or_unseen_job_in_the_mix_stops_prefetching():
    hold = AdaptivePrefetch()
    for name, seconds in (("app.short", 0.001), ("app.long", 2.0)):
        hold.observe(name, seconds)
        hold.claimed(name)
    assert hold.is_long("app.long") and not hold.is_long("app.short")
    assert hold.prefetch(8) == 0
    hold.last_claimed["app.long"] -= 60
    assert hold.prefetch(8) > 0
    hold.claimed("app.new")
    assert hold.prefetch(8) == 0


def test_the_average_follows_recent_durations():
    hold = AdaptivePrefetch()
    hold.observe("app.job", 1.0)
    for _ in range(30):
        hold.observe("app.job", 0.001)
    assert not hold.is_long("app.job")
    assert hold.average["app.job"] < 0.003  # the old 1 s run weighs 0.8 ** 30 ≈ 0.1 %


@pytest.mark.django_db(transaction=True)
def test_a_no_flags_worker_holds_many_short_jobs_and_leaves_long_ones_to_others(
    start_worker, other_connection
):
    """A worker started without options (4 slots, adaptive prefetch) holds more short jobs
    than it has executors, but a long job only for a free executor: a second worker runs the
    other long jobs instead of waiting for them behind the first."""
    first = start_worker()
    wait_until(lambda: "started" in first.output(), timeout=60)
    assert "concurrency=4" in first.output() and "prefetch=auto" in first.output()
    time.sleep(0.5)  # registered and listening
    # Alone at first, so that how many short jobs it holds does not depend on how fast another
    # worker takes them: it learns their duration and builds up what it holds.
    demo.noop.enqueue_many([((), {})] * 8000)
    held = "SELECT count(*) FROM pgjobs_job WHERE status = 'running' AND worker LIKE %s"
    held_short = 0
    deadline = time.monotonic() + 60
    while held_short <= 4 and Job.objects.exists():
        assert time.monotonic() < deadline, "short jobs left after 60 s"
        short = other_connection.execute(held + " AND name LIKE '%%noop'", (f"%:{first.pid}:%",))
        held_short = max(held_short, short.fetchone()[0])
        time.sleep(0.005)
    assert held_short > 4, "short jobs were claimed one per slot"
    # Then long (unseen) jobs behind more short ones, with a second worker to take them.
    second = start_worker("--concurrency", "8", "--prefetch", "0", "--batch-size", "8")
    wait_until(lambda: "started" in second.output(), timeout=60)
    time.sleep(0.5)
    long_labels = [f"long-{i}" for i in range(8)]
    demo.record.enqueue_many([((label,), {"sleep": 1.5}) for label in long_labels])
    demo.noop.enqueue_many([((), {})] * 3000)
    wait_until(lambda: not Job.objects.exists(), timeout=120)
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output()
    ran = dict(Execution.objects.values_list("label", "pid"))
    assert sorted(ran) == long_labels and Execution.objects.count() == len(long_labels)
    # Long jobs it claimed beyond its free slots went back at once: the first worker ran at
    # most one per slot (a fifth would have had to wait 1.5 s for a slot), the second the rest.
    by_first = sum(pid == first.pid for pid in ran.values())
    assert by_first <= 4, f"the first worker ran {by_first} long jobs"
    assert not DeadLetter.objects.exists()


def held_by(conn, worker) -> int:
    return conn.execute(
        "SELECT count(*) FROM pgjobs_job WHERE status = 'running' AND worker LIKE %s",
        (f"%:{worker.pid}:%",),
    ).fetchone()[0]


@pytest.mark.alone  # beside the other tests it twice never held more than 12 jobs in 60 s
@pytest.mark.django_db(transaction=True)
def test_a_no_flags_worker_stopped_hands_back_its_prefetched_jobs_unspent(
    start_worker, other_connection
):
    """Jobs of 20 ms (10 ms ones were all run before a loaded machine's worker got round to
    the SIGTERM: nothing was left to hand back). Held beyond its executors: more than twice as
    many jobs as it runs at once (prefetch holds 0.1 s of work per executor: 20 of these)."""
    labels = [f"short-{i}" for i in range(800)]
    demo.record.enqueue_many([((label,), {"sleep": 0.02}) for label in labels])
    worker = start_worker()
    wait_until(
        lambda: held_by(other_connection, worker) > 2 * DEFAULT_CONCURRENCY,
        timeout=60,
        interval=0.005,
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert "handed back" in worker.output()
    # the stop's log line counts the jobs running apart from those it hands back. Those that ran
    # and whose outcome the dispatcher has not taken yet count as running (read on the signal's
    # thread), beside the jobs their executors started next: a few rounds of the executors when
    # the dispatcher was slow to take them (20 ms jobs, a statement slowed on a loaded machine),
    # never the prefetched ones too. (How many it says are prefetched depends on the moment:
    # the rows the test saw claimed may still be on their way to the dispatcher.)
    stopping = r"SIGTERM: stopping; waiting up to \S+ for (\d+) running job\(s\)"
    said = re.findall(stopping, worker.output())
    assert said, worker.output()
    assert int(said[0]) <= 4 * DEFAULT_CONCURRENCY, worker.output()
    left = list(Job.objects.values_list("status", "attempts"))
    assert left and all(row == ("ready", 0) for row in left), left[:5]  # no attempt spent
    survivor = start_worker()
    wait_until(lambda: not Job.objects.exists(), timeout=120)
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()
    ran = list(Execution.objects.values_list("label", flat=True))
    assert sorted(ran) == sorted(labels)  # each ran exactly once
    assert not DeadLetter.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_prefetched_jobs_of_a_sigkilled_no_flags_worker_are_rescued(start_worker, other_connection):
    labels = [f"short-{i}" for i in range(1000)]
    demo.record.enqueue_many([((label,), {"sleep": 0.01}) for label in labels])
    victim = start_worker(env=FAST_LEASES)
    wait_until(lambda: held_by(other_connection, victim) > 8, timeout=60, interval=0.005)
    victim.kill()
    survivor = start_worker(env=FAST_LEASES)
    wait_until(lambda: not Job.objects.exists(), timeout=120)
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()
    ran = set(Execution.objects.values_list("label", flat=True))
    assert ran == set(labels), "a job was lost"
    assert not DeadLetter.objects.exists()
