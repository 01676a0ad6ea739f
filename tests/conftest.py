"""Fixtures shared by the suite.

The database is real PostgreSQL: ``DATABASE_URL`` if set, else a throwaway server started by
testproject/settings.py (see testproject/throwaway_pg.py). pytest-django creates the test
database on it; worker subprocesses get a ``DATABASE_URL`` naming that test database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import psycopg
import pytest
from helpers import MANAGE, ROOT, WorkerProcess, database_url_for_tests


@pytest.fixture
def other_connection() -> Iterator[psycopg.Connection]:
    """A second, independent connection (autocommit) to the test database."""
    with psycopg.connect(database_url_for_tests(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def start_worker(tmp_path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py runjobs`` subprocesses against the test database; all are killed at the
    end of the test."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        environment = {
            **os.environ,
            "DATABASE_URL": database_url_for_tests(),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        handle = open(log, "w")  # noqa: SIM115 - closed with the process
        popen = subprocess.Popen(
            [sys.executable, str(MANAGE), "runjobs", *args],
            cwd=ROOT,
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        process = WorkerProcess(popen, log)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.popen.poll() is None:
            process.kill()


def pytest_report_header(config) -> str:
    """Which PostgreSQL the run uses: CI runs the suite on two major versions."""
    from testproject import throwaway_pg

    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        version = conn.info.server_version
    source = throwaway_pg.server_description() or "the server DATABASE_URL names"
    return f"PostgreSQL server {version // 10000}.{version % 10000}: {source}"
