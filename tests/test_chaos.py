"""The chaos suite: real ``runjobs`` processes on real PostgreSQL while things go wrong.

Scenarios: workers SIGKILLed at random and restarted, a PostgreSQL restart in the middle of a
run, ``pg_terminate_backend`` on the workers' connections (while they run jobs, and while they
are idle: that one asserts no attempt was spent), a job running longer than its lease while its
worker is alive, and a worker paused (SIGSTOP) past its lease then resumed.

Every scenario checks the same promises: every job either succeeded or sits in
``pgjobs_deadletter`` (0 lost); atomic jobs' effects happen exactly once; a non-atomic job runs
again only when the claim of its earlier run was in flight at a disruption (the suite reads the
claims each disruption interrupted from ``pgjobs_job``), and that count is reported and bounded;
a job is dead-lettered only when every one of its attempts was interrupted; workers that were
not killed never crash.

Size comes from the environment (defaults: 1,000 jobs of 100 ms, 8 kills, which fit the test
command's budget on 2 cores; `.ci/run` runs the suite again at 4,000 jobs of 50 ms, 12 kills)::

    PGJOBS_CHAOS_JOBS=10000 PGJOBS_CHAOS_KILLS=20 \
        python -m pytest -m chaos tests/test_chaos.py

The kill scenario fails unless it reaches ``PGJOBS_CHAOS_KILLS`` kills before the jobs run out.

``PGJOBS_CHAOS_WORKERS`` (4), ``PGJOBS_CHAOS_CONCURRENCY`` (4), ``PGJOBS_CHAOS_JOB_SECONDS``
(0.1, how long each job sleeps), ``PGJOBS_CHAOS_SEED`` (random, printed) and
``PGJOBS_CHAOS_REPORT`` (a file the figures are appended to as JSON lines) tune the rest. Each
scenario prints one ``chaos figures:`` line. ``PGJOBS_CHAOS_DEFAULTS=1`` starts the workers as
``runjobs`` starts with no options (4 slots, adaptive prefetch) instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter as Tally
from collections import defaultdict

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, connection
from helpers import FAST_LEASES, database_url_for_tests, wait_until

from django_pgjobs.management.commands.runjobs import DEFAULT_CONCURRENCY
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.worker.holding import MAX_HELD
from testproject import throwaway_pg
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution

DEFAULTS = os.environ.get("PGJOBS_CHAOS_DEFAULTS") == "1"
# The test command's size: 1,000 jobs of 100 ms and 8 kills, every scenario and every check of
# the bigger runs in about half their time (the suite's five big scenarios took 190 s of worker
# time at 2,000 jobs and 12 kills, 106 s at this size, on the same loaded machine). `.ci/run`
# runs the chaos suite again at 4,000 jobs of 50 ms and 12 kills, four times the claims.
JOBS = int(os.environ.get("PGJOBS_CHAOS_JOBS", "1000"))
KILLS = int(
    os.environ.get("PGJOBS_CHAOS_KILLS", "12" if "PGJOBS_CHAOS_JOBS" in os.environ else "8")
)
WORKERS = int(os.environ.get("PGJOBS_CHAOS_WORKERS", "4"))
CONCURRENCY = (
    DEFAULT_CONCURRENCY if DEFAULTS else int(os.environ.get("PGJOBS_CHAOS_CONCURRENCY", "4"))
)
# Each job sleeps this long, so a run lasts long enough for its kills however fast the machine.
JOB_SECONDS = float(os.environ.get("PGJOBS_CHAOS_JOB_SECONDS", "0.1"))
PREFETCH = 2
# Most jobs one worker holds claimed or running (adaptive prefetch: its cap).
HELD = MAX_HELD if DEFAULTS else CONCURRENCY + PREFETCH
WORKER_OPTIONS = (
    [] if DEFAULTS else ["--concurrency", str(CONCURRENCY), "--prefetch", str(PREFETCH)]
)
SEED = int(os.environ.get("PGJOBS_CHAOS_SEED") or random.SystemRandom().randrange(10**6))
REPORT = os.environ.get("PGJOBS_CHAOS_REPORT")
# Generous for the big run: 10,000 jobs under 20+ kills take about a minute.
TIMEOUT = max(300, JOBS // 10)

# Leases short enough that a killed worker's jobs are rescued within seconds, long enough that a
# live worker on a loaded 2-core machine never misses one (heartbeat every second).
CHAOS_ENV = {
    "PGJOBS_LEASE_SECONDS": "4",
    "PGJOBS_HEARTBEAT_SECONDS": "1",
    "PGJOBS_RESCUE_INTERVAL_SECONDS": "1",
}

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(TIMEOUT + 120),
]


@dataclasses.dataclass
class Figures:
    scenario: str
    jobs: int = 0
    atomic: int = 0
    job_seconds: float = JOB_SECONDS
    workers: int = WORKERS
    concurrency: int = CONCURRENCY
    kills: int = 0
    # claims interrupted by the disruptions: the victim's (a kill) or everyone's (a restart, a
    # termination) jobs claimed and not yet acknowledged, running or finished
    in_flight: int = 0
    restarts: int = 0
    pg_restarts: int = 0
    terminated: int = 0
    disruptions: int = 0  # events that could interrupt jobs in flight (kills, restarts, ...)
    lost: int = 0
    duplicated: int = 0  # extra runs of non-atomic jobs, each of a claim that was in flight
    duplicate_bound: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    seed: int = SEED

    def publish(self, capsys) -> None:
        line = " ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())
        with capsys.disabled():
            print(f"\nchaos figures: {line}")
        if REPORT:
            with open(REPORT, "a") as report:
                report.write(json.dumps(dataclasses.asdict(self)) + "\n")


def _db_retry(query, attempts: int = 60):
    """Run an ORM query from the test process, reconnecting while PostgreSQL restarts."""
    for _ in range(attempts):
        try:
            return query()
        except (OperationalError, InterfaceError):
            connection.close()
            time.sleep(0.5)
    return query()


def enqueue_chaos_jobs(
    prefix: str, jobs: int, max_attempts: int | None = None
) -> tuple[dict[int, str], set[int]]:
    """Half plain ``record`` jobs, half ``record_atomic``; returns id -> label and atomic ids."""
    record, record_atomic = (
        (demo.record, demo.record_atomic)
        if max_attempts is None
        else (
            demo.record.using(max_attempts=max_attempts),
            demo.record_atomic.using(max_attempts=max_attempts),
        )
    )
    labels = [f"{prefix}-{i}" for i in range(jobs)]
    plain, atomic = labels[::2], labels[1::2]
    by_id: dict[int, str] = {}
    atomic_ids: set[int] = set()
    sleep = {"sleep": JOB_SECONDS}
    for start in range(0, len(plain), 2500):
        chunk = plain[start : start + 2500]
        for row in record.enqueue_many([((label,), sleep) for label in chunk]):
            by_id[row.pk] = row.args[0]
    for start in range(0, len(atomic), 2500):
        chunk = atomic[start : start + 2500]
        for row in record_atomic.enqueue_many([((label,), sleep) for label in chunk]):
            by_id[row.pk] = row.args[0]
            atomic_ids.add(row.pk)
    assert len(by_id) == jobs
    return by_id, atomic_ids


# A claim is a job id and the attempt it started (what ``Execution.attempt`` records of a run).
RUNNING_CLAIMS = "SELECT id, attempts FROM pgjobs_job WHERE status = 'running' AND worker LIKE %s"
# What an interrupted attempt can end with: its lease expired (its worker died or lost the
# database), or, where the workers' connections are cut, a connection error in the job itself.
LEASE_EXPIRED = "LeaseExpired"
CONNECTION_ERRORS = {"django.db.utils.OperationalError", "django.db.utils.InterfaceError"}
# One worker's backends (told apart by application_name), and those of them running a statement
# that may still commit: not waiting for a lock, nor for their client to read a result (a
# stopped client never will).
BACKENDS = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name = %s"
)
STATEMENTS_UNDER_WAY = (
    BACKENDS + " AND state = 'active' AND wait_event_type IS DISTINCT FROM 'Lock' "
    "AND wait_event_type IS DISTINCT FROM 'Client'"
)


def running_claims(conn: psycopg.Connection, worker_like: str = "%") -> set[tuple[int, int]]:
    """The claims (job id, attempt) held by the workers whose id matches ``worker_like``: jobs
    claimed and not acknowledged, whether waiting, running or finished."""
    return set(conn.execute(RUNNING_CLAIMS, (worker_like,)).fetchall())


def _poll(predicate, timeout: float, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def _count(conn: psycopg.Connection, sql: str, *params) -> int:
    return conn.execute(sql, params).fetchone()[0]


class ChaosRun:
    """One scenario's run: the jobs, the workers, the figures, and the checks at the end."""

    def __init__(self, scenario: str, start_worker) -> None:
        self.figures = Figures(scenario, jobs=JOBS)
        self.by_id, self.atomic_ids = enqueue_chaos_jobs(scenario, JOBS)
        self.figures.atomic = len(self.atomic_ids)
        self._start_worker = start_worker
        self.started_workers = 0
        self.in_flight: set[tuple[int, int]] = set()  # claims interrupted by a disruption
        self.started = time.monotonic()
        self.workers = [self.start_worker() for _ in range(WORKERS)]
        self.killed: list = []

    def start_worker(self):
        # its own application_name, so that the suite can tell its backends apart
        self.started_workers += 1
        app_name = f"pgjobs-chaos-{self.started_workers}"
        batch = [] if DEFAULTS else ["--batch-size", str(HELD)]
        worker = self._start_worker(
            *WORKER_OPTIONS,
            *batch,
            env={**CHAOS_ENV, "PGAPPNAME": app_name},
        )
        worker.app_name = app_name
        return worker

    def jobs_held(self) -> Tally:
        """Running jobs per worker pid (worker ids are ``host:pid:suffix``)."""
        workers = Job.objects.filter(status="running").values_list("worker", flat=True)
        return Tally(int(worker.rsplit(":", 2)[1]) for worker in workers)

    def kill_and_restart(self, index: int, admin: psycopg.Connection) -> None:
        """SIGKILL one worker and start another; the victim's claims join ``in_flight``.

        The victim is stopped (SIGSTOP) first and the statements it had sent are let finish, so
        that the claims the table shows are the ones it held when it died. A statement stuck on a
        lock may still commit after the kill: the claims are read again once the victim's
        backends are gone (a fresh claim's lease outlasts that by seconds)."""
        victim = self.workers[index]
        victims_claims = f"%:{victim.pid}:%"
        victim.signal(signal.SIGSTOP)
        _poll(lambda: not _count(admin, STATEMENTS_UNDER_WAY, victim.app_name), timeout=5)
        claims = running_claims(admin, victims_claims)
        if claims:  # then it is connected: its backends must be found by their name
            assert _count(admin, BACKENDS, victim.app_name), "PGAPPNAME not in effect"
        victim.kill()
        _poll(lambda: not _count(admin, BACKENDS, victim.app_name), timeout=10)
        self.in_flight |= claims | running_claims(admin, victims_claims)
        self.killed.append(victim)
        self.figures.kills += 1
        self.workers[index] = self.start_worker()
        self.figures.restarts += 1

    def finish(self, capsys, *, expect_reconnects: bool = False) -> None:
        """Wait for the queue to empty, stop the survivors, account for every job, publish."""
        wait_until(
            lambda: not _db_retry(lambda: Job.objects.exists()), timeout=TIMEOUT, interval=0.5
        )
        self.figures.seconds = round(time.monotonic() - self.started, 1)
        outputs = [worker.output() for worker in self.workers]
        stop_and_check_survivors(self.workers)
        for victim in self.killed:
            assert victim.popen.returncode == -signal.SIGKILL
            check_log_has_no_crash(victim.output())
        if expect_reconnects:
            assert any("database unavailable" in output for output in outputs)
        account(self, cut_connections=expect_reconnects)
        self.figures.publish(capsys)


def stop_and_check_survivors(survivors) -> None:
    """SIGTERM every worker that was never killed: each exits 0 and logged no crash. A worker
    still starting (Django set up, no signal handler yet) would die of the signal: each is
    signalled once it has said it started."""
    for worker in survivors:
        wait_until(lambda w=worker: " started: " in w.output() or w.popen.poll() is not None)
        assert worker.popen.poll() is None, "a worker died by itself:\n" + worker.output()
        worker.signal(signal.SIGTERM)
    for worker in survivors:
        try:
            code = worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.signal(signal.SIGUSR1)  # runjobs prints every thread's stack
            time.sleep(1)
            pytest.fail("a worker did not exit within 60 s of SIGTERM:\n" + worker.output())
        assert code == 0, worker.output()
        check_log_has_no_crash(worker.output())


def check_log_has_no_crash(output: str) -> None:
    assert "Traceback" not in output, output
    assert "Exception in thread" not in output, output


def account(run: ChaosRun, *, cut_connections: bool) -> None:
    """Fill lost/duplicated/dead-lettered and assert the promises of every scenario.

    ``cut_connections``: the scenario cut the workers' connections (a restart, terminations),
    so an attempt may also fail on a connection error, even one claimed after the cut (an
    executor's connection is found dead at its next use)."""
    figures, by_id, atomic_ids, in_flight = run.figures, run.by_id, run.atomic_ids, run.in_flight
    runs: dict[int, list[int]] = defaultdict(list)  # job id -> the attempts it ran
    for job_id, attempt in Execution.objects.values_list("job_id", "attempt"):
        runs[job_id].append(attempt)
    executed = Tally({job_id: len(attempts) for job_id, attempts in runs.items()})
    dead = {
        letter["job_id"]: letter
        for letter in DeadLetter.objects.filter(job_id__in=list(by_id)).values(
            "job_id", "reason", "error_type", "attempts", "max_attempts", "errors"
        )
    }
    remaining = set(Job.objects.values_list("id", flat=True))
    lost = sorted(
        job_id
        for job_id in by_id
        if job_id in remaining or (job_id not in dead and executed[job_id] == 0)
    )
    figures.lost = len(lost)
    figures.in_flight = len(in_flight)
    figures.dead_lettered = len(dead)
    figures.duplicated = sum(
        executed[job_id] - 1
        for job_id in by_id
        if job_id not in atomic_ids and executed[job_id] > 1
    )
    # A disrupted worker held at most HELD jobs claimed or running, plus as many
    # finished ones whose acknowledgement was to travel with its next claim: only those can run
    # again, and only the non-atomic ones show it.
    figures.duplicate_bound = figures.disruptions * 2 * HELD
    assert not lost, f"{len(lost)} job(s) lost, e.g. {lost[:10]}"
    # Atomic jobs: their writes commit with their completion, so exactly once (zero times for a
    # dead-lettered one: every attempt rolled back).
    counters = dict(Counter.objects.values_list("name", "value"))
    wrong = [
        (job_id, executed[job_id], counters.get(by_id[job_id], 0))
        for job_id in atomic_ids
        if (executed[job_id], counters.get(by_id[job_id], 0))
        != ((0, 0) if job_id in dead else (1, 1))
    ]
    assert not wrong, f"atomic jobs ran other than exactly once (id, runs, counter): {wrong[:10]}"
    # Non-atomic jobs: a claim runs at most once, and every run but the acknowledged one (the
    # last; none for a dead letter) lost its acknowledgement: its claim was in flight at a
    # disruption.
    twice = [job_id for job_id, attempts in runs.items() if len(set(attempts)) < len(attempts)]
    assert not twice, f"a claim ran twice (job ids): {twice[:10]}"
    unacknowledged = [
        (job_id, attempt)
        for job_id in by_id.keys() - atomic_ids
        for attempt in sorted(runs[job_id])[: None if job_id in dead else -1]
    ]
    not_in_flight = sorted(claim for claim in unacknowledged if claim not in in_flight)
    assert not not_in_flight, (
        "non-atomic jobs ran again though the claim of their earlier run was in flight at no "
        f"disruption (job id, attempt): {not_in_flight[:10]}"
    )
    assert figures.duplicated <= figures.duplicate_bound, figures
    # Dead letters: with the jobs' max_attempts, only a job whose every attempt was interrupted.
    failures = {LEASE_EXPIRED} | (CONNECTION_ERRORS if cut_connections else set())
    for job_id, letter in dead.items():
        assert letter["reason"], f"dead letter of job {job_id} has no reason"
        assert letter["error_type"] in failures, letter
        assert letter["attempts"] >= letter["max_attempts"], letter
        ended = {entry.get("attempt"): entry.get("type") for entry in letter["errors"]}
        uninterrupted = [
            attempt
            for attempt in range(1, letter["attempts"] + 1)
            if (job_id, attempt) not in in_flight
            and not (cut_connections and ended.get(attempt) in CONNECTION_ERRORS)
        ]
        assert not uninterrupted, (
            f"job {job_id} was dead-lettered though attempts {uninterrupted} were in flight at "
            f"no disruption: {letter}"
        )


def test_random_sigkills_while_workers_restart(start_worker, capsys):
    """The issue's run: workers SIGKILLed at random every 0.3-1 s and restarted at once."""
    rng = random.Random(SEED)
    run = ChaosRun("random-sigkill", start_worker)
    deadline = run.started + TIMEOUT
    with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
        while run.figures.kills < KILLS and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 1.0))
            if not Job.objects.exists():
                break
            # a random worker, among those holding jobs when there are any: killing one still
            # starting up would test little
            held = run.jobs_held()
            busy = [i for i, worker in enumerate(run.workers) if held[worker.pid]]
            run.kill_and_restart(rng.choice(busy) if busy else rng.randrange(WORKERS), admin)
    run.figures.disruptions = run.figures.kills
    assert run.figures.kills >= KILLS, (
        f"the jobs ran out after {run.figures.kills} of the {KILLS} kills asked for; "
        "raise PGJOBS_CHAOS_JOBS"
    )
    run.finish(capsys)


@pytest.mark.parametrize(
    "down_seconds",
    [2.0, 2 * float(CHAOS_ENV["PGJOBS_LEASE_SECONDS"])],
    ids=["short-outage", "outage-past-the-lease"],
)
def test_postgresql_restart_in_the_middle(
    own_postgresql_server, start_worker, capsys, down_seconds
):
    """Past the lease, every running job's lease has expired when the server is back: the
    workers' rescue and their late acknowledgements race, and the claim tokens decide."""
    run = ChaosRun(f"postgresql-restart-{down_seconds:g}s", start_worker)
    wait_until(lambda: Execution.objects.count() >= JOBS // 3, timeout=TIMEOUT)
    # A SHARE lock on pgjobs_job lets the claims, acknowledgements and rescues under way commit,
    # then holds back every other one until the server is gone: the claims read under it are
    # exactly those the restart interrupts.
    frozen = psycopg.connect(database_url_for_tests())
    try:
        frozen.execute("SET lock_timeout = '30s'")
        frozen.execute("LOCK TABLE pgjobs_job IN SHARE MODE")
        run.in_flight |= running_claims(frozen)
        # immediate: no checkpoint, crash recovery at start, like a power cut of the server alone
        throwaway_pg.restart("immediate", pause_seconds=down_seconds)
    finally:
        frozen.close()
    connection.close()
    run.figures.pg_restarts = 1
    run.figures.disruptions = WORKERS  # every worker's jobs in flight were interrupted at once
    run.finish(capsys, expect_reconnects=True)


def test_worker_connections_terminated(start_worker, capsys):
    run = ChaosRun("pg_terminate_backend", start_worker)
    rounds = 0
    with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
        test_backend = _db_retry(_backend_pid)
        while rounds < 5 and Job.objects.exists():
            goal = (rounds + 1) * JOBS // 8
            wait_until(lambda goal=goal: Execution.objects.count() >= goal, timeout=60)
            # Under a SHARE lock on pgjobs_job (as for the restart), the running claims read are
            # exactly those the terminations interrupt: each backend is waited for until it has
            # exited, so none of their claims blocked on the lock can commit after it.
            with admin.transaction():
                admin.execute("SET LOCAL lock_timeout = '30s'")
                admin.execute("LOCK TABLE pgjobs_job IN SHARE MODE")
                run.in_flight |= running_claims(admin)
                terminated = admin.execute(
                    "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND pid <> %s",
                    (test_backend,),
                ).fetchone()[0]
            run.figures.terminated += terminated
            rounds += 1
    run.figures.disruptions = rounds * WORKERS
    assert rounds >= 3, "the jobs ran out before three rounds of terminations; raise the jobs"
    run.finish(capsys, expect_reconnects=True)


def test_connections_terminated_while_the_workers_are_idle(start_worker, capsys):
    """Faults between jobs cost no attempt: waves of single-attempt jobs, and between waves,
    while nothing is claimed anywhere, every backend of the workers (dispatchers, executors,
    listeners) is terminated. Every job must run once, on its first attempt: none is
    dead-lettered, none retried."""
    rounds = 5
    app_name = "pgjobs-chaos-idle"
    figures = Figures("idle-connections-terminated")
    env = {**CHAOS_ENV, "PGJOBS_TEST_CONN_MAX_AGE": "none", "PGAPPNAME": app_name}
    workers = [start_worker(*WORKER_OPTIONS, env=env) for _ in range(WORKERS)]
    by_id: dict[int, str] = {}
    atomic_ids: set[int] = set()
    started = time.monotonic()
    with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
        for wave in range(rounds + 1):
            if wave:  # the workers are idle: the previous wave is done
                assert not running_claims(admin)
                figures.terminated += _count(
                    admin,
                    "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    app_name,
                )
                figures.disruptions += 1
            ids, atomic = enqueue_chaos_jobs(f"idle-{wave}", JOBS // (rounds + 1), max_attempts=1)
            by_id |= ids
            atomic_ids |= atomic
            wait_until(lambda: not Job.objects.exists(), timeout=TIMEOUT, interval=0.2)
    figures.seconds = round(time.monotonic() - started, 1)
    figures.jobs, figures.atomic = len(by_id), len(atomic_ids)
    stop_and_check_survivors(workers)
    assert any("database unavailable" in worker.output() for worker in workers)
    runs = Tally(Execution.objects.filter(job_id__in=list(by_id)).values_list("job_id", "attempt"))
    dead = DeadLetter.objects.filter(job_id__in=list(by_id))
    figures.dead_lettered = dead.count()
    figures.lost = len(
        by_id.keys() - {job_id for job_id, _ in runs} - set(dead.values_list("job_id", flat=True))
    )
    figures.duplicated = sum(count - 1 for count in runs.values())
    figures.publish(capsys)
    assert not figures.dead_lettered, list(dead.values("job_id", "reason")[:5])
    assert figures.lost == 0 and figures.duplicated == 0, figures
    assert set(runs) == {(job_id, 1) for job_id in by_id}, "an attempt was spent on a fault"
    counters = dict(Counter.objects.values_list("name", "value"))
    assert all(counters.get(by_id[job_id]) == 1 for job_id in atomic_ids)


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


# A 6 s lease renewed every 0.5 s: 5.5 s of slack for a heartbeat held up on a loaded machine
# (a 2 s lease once expired under a full parallel suite, a 4 s one under four test processes at
# a load average of 7; what is tested is that heartbeats keep the lease, not how late one may
# be).
HEARTBEAT_LEASES = {**FAST_LEASES, "PGJOBS_LEASE_SECONDS": "6"}


def test_job_longer_than_its_lease_is_kept_by_heartbeats(start_worker):
    """A live worker's heartbeats keep a job whose run outlasts the lease 1.7 times over (20
    heartbeats), while another worker stands ready to rescue anything that expires."""
    lease = float(HEARTBEAT_LEASES["PGJOBS_LEASE_SECONDS"])
    plain = demo.record.enqueue("long-plain", sleep=1.7 * lease)
    atomic = demo.record_atomic.enqueue("long-atomic", sleep=1.7 * lease)
    runner = start_worker("--concurrency", "2", env=HEARTBEAT_LEASES)
    wait_until(lambda: Job.objects.filter(status="running").count() == 2, timeout=30)
    rescuer = start_worker("--concurrency", "2", env=HEARTBEAT_LEASES)
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    stop_and_check_survivors([runner, rescuer])
    runs = list(Execution.objects.order_by("label").values_list("label", "attempt", "job_id"))
    assert runs == [("long-atomic", 1, atomic.pk), ("long-plain", 1, plain.pk)]
    assert Counter.objects.get(name="long-atomic").value == 1
    assert "rescued" not in runner.output() + rescuer.output()
    assert not DeadLetter.objects.exists()


@pytest.mark.parametrize(
    "job, late_message",
    [
        (demo.record_atomic, "finished after its lease was lost"),
        (demo.record, "succeeded but its lease was lost before the acknowledgement"),
        (demo.sleep_then_fail_first, "failed but its lease was lost; its new owner decides"),
    ],
    ids=["atomic-success", "plain-success", "failure"],
)
def test_paused_worker_loses_its_lease_and_its_late_result_is_refused(
    start_worker, job, late_message
):
    """SIGSTOP a worker mid-job past its lease: another worker rescues the job and finishes it;
    when the paused worker resumes, its late ack or failure no longer matches the claim token."""
    label = f"paused-{job.name.rsplit('.', 1)[1]}"
    enqueued = job.enqueue(label, sleep=1.5)
    paused = start_worker("--concurrency", "1", env=FAST_LEASES)
    wait_until(lambda: Job.objects.filter(status="running").exists(), timeout=30)
    time.sleep(0.2)  # inside the job's sleep
    paused.signal(signal.SIGSTOP)
    try:
        new_owner = start_worker("--concurrency", "1", env=FAST_LEASES)
        # the lease expires, the new owner's rescue requeues the job and it claims attempt 2
        wait_until(lambda: not Job.objects.filter(pk=enqueued.pk, attempts=1).exists(), timeout=30)
    finally:
        paused.signal(signal.SIGCONT)
    wait_until(lambda: not Job.objects.filter(pk=enqueued.pk).exists(), timeout=30)
    wait_until(lambda: late_message in paused.output(), timeout=30)
    stop_and_check_survivors([paused, new_owner])
    assert not DeadLetter.objects.exists()
    attempts = sorted(Execution.objects.filter(label=label).values_list("attempt", flat=True))
    if job is demo.record_atomic:
        # the paused worker's transaction was rolled back: one effect, by the new owner
        assert attempts == [2]
        assert Counter.objects.get(name=label).value == 1
    else:
        # a non-atomic job's own side effects cannot be taken back: both runs recorded
        assert attempts == [1, 2]
    assert "lost=1" in paused.output()
