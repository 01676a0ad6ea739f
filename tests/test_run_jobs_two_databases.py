"""run_jobs() inside a TestCase when ``PGJOBS["DATABASE"]`` names a second alias: the
helpers read that alias, and each job runs in a savepoint on every connection in a transaction
(a database error on "default" does not break the test after it). Its own settings, so its
own pytest (tests/two_databases/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import database_url_for_tests

TESTS = Path(__file__).resolve().parent


def test_run_jobs_with_the_jobs_on_a_second_database(db):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/two_databases/test_inline.py",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "--ds",
            "two_databases.settings",
            "-q",
        ],
        cwd=TESTS.parent,
        env={**os.environ, "DATABASE_URL": database_url_for_tests(), "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "3 passed" in run.stdout, run.stdout[-2000:]
