"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.db import connection

from django_pgjobs.worker import Worker

ROOT = Path(__file__).resolve().parent.parent
MANAGE = ROOT / "testproject" / "manage.py"

# Settings for worker processes (start_worker's env) whose leases expire within seconds, so a
# test sees a rescue quickly; production keeps the defaults.
FAST_LEASES = {
    "PGJOBS_LEASE_SECONDS": "2",
    "PGJOBS_HEARTBEAT_SECONDS": "0.5",
    "PGJOBS_RESCUE_INTERVAL_SECONDS": "0.5",
}


def database_url_for_tests() -> str:
    """DATABASE_URL of the test database pytest-django created."""
    base = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(base._replace(path="/" + connection.settings_dict["NAME"]))


def insert_jobs(cursor, jobs: int, status: str = "ready") -> None:
    """``jobs`` rows of a job named 'x.y' in the default queue, due now, written in one
    statement (as a busy installation's history or backlog, for the plans' tests). ``cursor``: a
    Django cursor or a psycopg connection."""
    cursor.execute(
        """
        INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after,
                                attempts, max_attempts, created_at, finished_at, worker, errors)
        SELECT 'x.y', 'default', 0, '[]', '{}', %s, now(), CASE WHEN %s = 'ready' THEN 0 ELSE 1 END,
               5, now(), CASE WHEN %s = 'ready' THEN NULL ELSE now() END, '', '[]'
        FROM generate_series(1, %s)
        """,
        [status, status, status, jobs],
    )


def count(conn: psycopg.Connection, sql: str, *params) -> int:
    return conn.execute(sql, params).fetchone()[0]


def run_worker(**options) -> Worker:
    """Run an in-process worker until nothing is ready (burst), like ``runjobs --burst``."""
    options.setdefault("burst", True)
    options.setdefault("install_signal_handlers", False)
    options.setdefault("listen", False)
    worker = Worker(**options)
    assert worker.run() == 0
    return worker


def drain(timeout: float = 30.0, **options) -> None:
    """Run burst workers until no job is left ready or running (waits out retry backoffs)."""
    from django_pgjobs.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(status__in=["ready", "running"]).exists():
        assert time.monotonic() < deadline, "jobs still pending after drain timeout"
        run_worker(**options)
        time.sleep(0.05)


class WorkerProcess:
    def __init__(self, popen: subprocess.Popen, log: Path, ready: str | None = None) -> None:
        self.popen = popen
        self.log = log
        self.ready = ready  # what the command prints once its signal handlers are in place

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, signum: int) -> None:
        """Send ``signum``. SIGTERM and SIGINT wait until the command has said it is ready (or
        has exited): a ``runjobs`` still starting (Django set up, no handler yet) dies of them
        with -15 instead of stopping, which is not what a test stopping it means to check. (Seen
        when another worker drained the queue before this one had finished starting.)"""
        if self.ready and signum in (signal.SIGTERM, signal.SIGINT):
            wait_until(lambda: self.ready in self.output() or self.popen.poll() is not None)
        self.popen.send_signal(signum)

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def kill_group(self) -> None:
        """SIGKILL the process and whatever it started (``runjobs --reload``'s worker child):
        a child left running after a failed test would claim the next tests' jobs."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole group has exited
        self.popen.wait(10)

    def wait(self, timeout: float = 60) -> int:
        return self.popen.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


# What a command prints once its signal handlers are in place (WorkerProcess.signal).
READY_LINES = {"runjobs": " started: "}


@contextmanager
def command_starter(command: str, logs: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """A function starting ``manage.py <command>`` subprocesses (``start(*args, env=...)``),
    each logging to ``logs/<command>-<n>.log``; all are killed on the way out."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        process = start_command(command, args, logs / f"{command}-{len(started)}.log", env)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill_group()


def start_command(command: str, args, log: Path, env: dict[str, str] | None) -> WorkerProcess:
    """``manage.py <command> <args>`` in a subprocess against the test database, its output
    in ``log``."""
    environment = {
        **os.environ,
        "DATABASE_URL": database_url_for_tests(),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    handle = open(log, "w")  # noqa: SIM115 - closed with the process
    popen = subprocess.Popen(
        [sys.executable, str(MANAGE), command, *args],
        cwd=ROOT,
        env=environment,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the end of the test kills its children
    )
    return WorkerProcess(popen, log, READY_LINES.get(command))


def wait_until(predicate: Callable[[], bool], timeout: float = 60, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def wait_for_leases_to_expire(timeout: float = 30) -> None:
    """Until no running job's lease is in the future, by the database's clock (the one the
    rescue reads): what a crashed worker's jobs wait for before a rescue takes them."""
    from django.db.models.functions import Now

    from django_pgjobs.models import Job

    wait_until(
        lambda: not Job.objects.filter(status="running", lease_expires_at__gte=Now()).exists(),
        timeout=timeout,
        interval=0.05,
    )


def waiting_on_a_lock() -> bool:
    """One statement of this test's database waits for a lock (a row another holds)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] == 1


def wait_until_listening(timeout: float = 60) -> None:
    """A worker of this test's database is in LISTEN (its listener's last statement): what is
    notified from now on reaches it, not only its next heartbeat."""
    from django.db import connection

    def listening() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query = 'LISTEN pgjobs'"
            )
            return cursor.fetchone()[0] > 0

    wait_until(listening, timeout=timeout)


LOOKED = re.compile(r"schedules looked at (\S+): (\d+) due, (\d+) fired, (\d+) fired elsewhere")


def schedule_looks(worker: WorkerProcess) -> list[tuple[datetime, int, int]]:
    """(when, fired, fired elsewhere) of each look at the schedules a worker logged (``runjobs
    -v 2``; when: the database's clock)."""
    return [
        (datetime.fromisoformat(m[1]), int(m[3]), int(m[4]))
        for m in LOOKED.finditer(worker.output())
    ]


@contextmanager
def registered_for_the_test(*definitions) -> Iterator[None]:
    """Register these ``@job(cron=...)`` definitions for the ``with`` block only: a module of
    recurring jobs left in the registry would have every later in-process worker of this test
    process write (and fire) its schedules."""
    from django_pgjobs import registry

    for definition in definitions:
        registry._add(definition)
    try:
        yield
    finally:
        for definition in definitions:
            registry._REGISTRY.pop(definition.name, None)


def unregister(*definitions) -> None:
    """Take definitions out of the registry (at a test module's import; see above)."""
    from django_pgjobs import registry

    for definition in definitions:
        registry._REGISTRY.pop(definition.name, None)


def enqueue_around_rollbacks(enqueue: Callable[[str], Any]) -> Any:
    """``enqueue("rolled back")`` in a transaction that rolls back, then, in one that commits,
    ``enqueue("savepoint rolled back")`` in a savepoint that rolls back and ``enqueue("kept")``;
    returns what the kept call returned."""
    from django.db import transaction

    class RollBack(Exception):
        pass

    try:
        with transaction.atomic():
            enqueue("rolled back")
            raise RollBack
    except RollBack:
        pass
    with transaction.atomic():
        try:
            with transaction.atomic():
                enqueue("savepoint rolled back")
                raise RollBack
        except RollBack:
            pass
        return enqueue("kept")
