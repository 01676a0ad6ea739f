"""Jobs a worker holds (prefetched) are not running: a worker killed while holding them gives
them back with their attempt unspent, while a job that started still spends its attempt, so a
job that kills its worker still ends in the dead letters (invariant 15)."""

from __future__ import annotations

import signal
import time
from collections import Counter as Tally

import pytest
from helpers import wait_for_leases_to_expire, wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

FAST_LEASES = {
    "PGJOBS_LEASE_SECONDS": "1.5",
    "PGJOBS_HEARTBEAT_SECONDS": "0.5",
    "PGJOBS_RESCUE_INTERVAL_SECONDS": "0.5",
}


def running_on(conn, worker) -> int:
    return conn.execute(
        "SELECT count(*) FROM pgjobs_job WHERE status = 'running' AND worker LIKE %s",
        (f"%:{worker.pid}:%",),
    ).fetchone()[0]


def drain_with_a_second_worker(start_worker) -> None:
    survivor = start_worker("--concurrency", "4", env=FAST_LEASES)
    wait_until(lambda: not Job.objects.exists(), timeout=90)
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()


def test_held_jobs_of_a_sigkilled_worker_keep_their_attempt_and_the_running_one_spends_it(
    start_worker, other_connection
):
    """``--prefetch 10``, one executor, single-attempt jobs: killed while the third runs, the
    worker held eight more. Those eight run and succeed afterwards; the third, which had
    started, is dead-lettered: its one attempt was spent. The third sleeps 10 s, so the kill
    lands while it runs however loaded the machine is (a sleep-based kill point once let the
    worker get past it)."""
    labels = [f"held-{i}" for i in range(11)]
    single = demo.record.using(max_attempts=1)
    jobs = [single.enqueue(label, sleep=10 if i == 2 else 0.1) for i, label in enumerate(labels)]
    victim = start_worker("--concurrency", "1", "--prefetch", "10", env=FAST_LEASES)
    wait_until(lambda: Execution.objects.count() >= 2, timeout=60, interval=0.02)
    wait_until(
        lambda: Job.objects.filter(pk=jobs[2].pk, started_at__isnull=False).exists(), timeout=30
    )
    assert running_on(other_connection, victim) == 9  # one running, eight held
    victim.kill()
    drain_with_a_second_worker(start_worker)

    dead = DeadLetter.objects.get()  # only the job that was running
    assert dead.job_id == jobs[2].pk and dead.attempts == 1, (dead.job_id, dead.reason)
    assert dead.error_type == "LeaseExpired" and "attempts exhausted" in dead.reason
    ran = Tally(Execution.objects.values_list("label", flat=True))
    assert ran == Tally(label for label in labels if label != "held-2")
    # the two that ran before the kill ran as attempt 1; the eight held ones had their attempt
    # given back (max_attempts raised to 2: the number 1 stays used, never run twice) and ran as 2
    attempts = dict(Execution.objects.values_list("label", "attempt"))
    assert {attempts[label] for label in labels[:2]} == {1}
    assert {attempts[label] for label in labels[3:]} == {2}


@pytest.mark.alone  # catches the adaptive prefetch holding: loaded neighbours starve it
def test_a_no_flags_worker_sigkilled_with_held_jobs_dead_letters_none_that_never_started(
    start_worker, other_connection
):
    """No flags: 4 executors and the adaptive prefetch, which holds about 20 of these 20 ms
    jobs. After the kill, every job that never started runs and succeeds; only jobs that had
    started can have spent their one attempt."""
    labels = [f"short-{i}" for i in range(600)]
    demo.record.using(max_attempts=1).enqueue_many(
        [((label,), {"sleep": 0.02}) for label in labels]
    )
    victim = start_worker(env=FAST_LEASES)
    wait_until(lambda: running_on(other_connection, victim) > 12, timeout=60, interval=0.005)
    victim.kill()
    before_kill = set(Execution.objects.values_list("label", flat=True))
    drain_with_a_second_worker(start_worker)

    dead = {args[0] for args in DeadLetter.objects.values_list("args", flat=True)}
    ran = set(Execution.objects.values_list("label", flat=True))
    assert ran | dead == set(labels)  # nothing lost
    # Dead-lettered: a job that ran before the kill (its acknowledgement was not sent yet), or
    # one of the 4 running at the kill; never one that was only held.
    running_at_the_kill = dead - before_kill
    assert len(running_at_the_kill) <= 4, f"held jobs spent their attempt: {sorted(dead)}"


def test_a_held_job_that_kills_its_worker_still_ends_in_the_dead_letters(start_worker):
    """The job that kills its worker waits held behind two others; its first start is not
    recorded before it kills the worker (it is given back unspent), but from then on it is only
    claimed to start at once, its start recorded first: dead-lettered once its attempts are
    spent (2, plus the one given back), having killed 3 workers at most."""
    demo.record.enqueue_many([(("before-1",), {"sleep": 0.3}), (("before-2",), {"sleep": 0.3})])
    poison = demo.crash_worker.enqueue()  # max_attempts=2, calls os._exit(13)
    deadline = time.monotonic() + 90
    exits = []
    while not DeadLetter.objects.exists():
        assert time.monotonic() < deadline, f"never dead-lettered; exits: {exits}"
        worker = start_worker("--concurrency", "1", "--prefetch", "10", "--burst", env=FAST_LEASES)
        exits.append(worker.wait(timeout=60))
        wait_for_leases_to_expire()  # of what it held
    dead = DeadLetter.objects.get()
    assert dead.job_id == poison.pk and dead.attempts == dead.max_attempts <= 3, dead.max_attempts
    assert dead.error_type == "LeaseExpired" and "attempts exhausted" in dead.reason
    assert exits.count(13) <= 3, exits  # two counted attempts, at most one start unrecorded
    assert set(Execution.objects.values_list("label", flat=True)) == {"before-1", "before-2"}


def test_a_burst_worker_drains_jobs_given_back_unstarted_before_it_exits(start_worker):
    """Rows as the rescue leaves the held jobs of a killed worker (attempt given back,
    ``returned_unstarted``). A ``--burst`` worker with prefetch once took a claim short of its
    limit for an empty queue and exited after one of six."""
    labels = [f"given-back-{i}" for i in range(6)]
    demo.record.enqueue_many([((label,), {"sleep": 0.05}) for label in labels])
    Job.objects.update(returned_unstarted=True, attempts=1, max_attempts=2)
    worker = start_worker("--burst", "--concurrency", "1", "--prefetch", "4")
    assert worker.wait(30) == 0, worker.output()
    assert not Job.objects.exists(), worker.output()
    ran = Tally(Execution.objects.values_list("label", flat=True))
    assert ran == Tally(labels)
    assert set(Execution.objects.values_list("attempt", flat=True)) == {2}


def test_jobs_given_back_unstarted_are_held_again_and_drain_at_full_speed(start_worker):
    """After a crash, the held jobs the rescue gave back (``returned_unstarted``) are held again
    like any other (their executor records their start before running them): when the claim
    took them only to start at once, a busy worker's claims came back nearly empty and it
    waited a poll interval each time, about one job per executor a second (40 jobs: 30 s)."""
    labels = [f"given-back-{i}" for i in range(40)]
    demo.record.enqueue_many([((label,), {"sleep": 0.01}) for label in labels])
    Job.objects.update(returned_unstarted=True, attempts=1, max_attempts=2)
    worker = start_worker("--concurrency", "1", "--prefetch", "10")  # not --burst: it waits
    wait_until(lambda: not Job.objects.exists(), timeout=15)  # 40 jobs of 10 ms
    assert Tally(Execution.objects.values_list("label", flat=True)) == Tally(labels)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
