"""Fixtures shared by the suite.

The database is real PostgreSQL: ``DATABASE_URL`` if set, else a throwaway server started by
testproject/settings.py (see testproject/throwaway_pg.py). pytest-django creates the test
database on it; worker subprocesses get a ``DATABASE_URL`` naming that test database.

The suite runs in parallel (pytest-xdist, ``-n`` in pyproject.toml's addopts). The controller
loads the settings first, so it starts the one server of the run and exports its address; the
xdist worker processes it starts inherit it and reuse it, each with a test database of its own
(pytest-django names it after the worker: ``test_postgres_gw0``, ...). A test that restarts
PostgreSQL takes ``own_postgresql_server``, so it never pulls the server from under the tests
running beside it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import flush
import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import translation
from helpers import (
    WorkerProcess,
    command_starter,
    database_url_for_tests,
    registered_for_the_test,
)

from testproject import throwaway_pg

# The admin's users (superuser, staff_no_perms, viewer), the browser (browser_page), PgBouncer
# (pgbouncer, through_pgbouncer) and the outbox's relays (start_relay): fixtures for every test
# module.
pytest_plugins = ["admin_data", "browser_support", "pgbouncer_support", "outbox_support"]

# The directory of the locks that let a test run alone (pytest_runtest_protocol below), made by
# the controller and shared by its worker processes.
ENV_TURNS = "PGJOBS_TEST_TURNS"


def pytest_addoption(parser, pluginmanager) -> None:
    """Accept the addopts' xdist options when xdist is off (``-p no:xdist``): a serial run."""
    if not pluginmanager.has_plugin("xdist"):
        group = parser.getgroup("xdist", "pytest-xdist is not loaded: these options do nothing")
        # _addoption: what xdist itself calls, since pytest reserves lowercase short options
        group._addoption("-n", "--numprocesses", dest="numprocesses", default=None)
        group.addoption("--maxschedchunk", dest="maxschedchunk", default=None)


def pytest_collection_modifyitems(config, items) -> None:
    """The long runs (the chaos suite and tests marked ``long``, half a minute to a minute
    each) first: a parallel run hands them out to different workers at its start, two tests at
    a time (``--maxschedchunk`` in addopts), instead of ending on one of them while the other
    workers idle. The tests that run ``alone`` last, when the others have little left to hold
    them up."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("alone") is not None,
            item.get_closest_marker("chaos") is None and item.get_closest_marker("long") is None,
        )
    )


def pytest_configure(config) -> None:
    # after each transactional test, only the tables it wrote to are emptied (tests/flush.py)
    flush.install()
    # The admin tests create users (admin_data.py): a password hashed with Django's default
    # PBKDF2 costs a quarter of a second of CPU, this one none; logging in works the same.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    if not hasattr(config, "workerinput"):  # the controller (or a serial run): before workers
        # beside the throwaway server's data, so that its watcher deletes them with it when the
        # run is killed
        server = throwaway_pg.data_dir()
        os.environ[ENV_TURNS] = tempfile.mkdtemp(
            prefix="pgjobs-test-turns-", dir=server.parent if server else None
        )


def pytest_unconfigure(config) -> None:
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(ENV_TURNS, ""), ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``alone`` runs with no other test of the run beside it: it waits for the
    tests under way in the other worker processes, which wait for it before their next one. A
    shared lock per test, an exclusive one for ``alone``; the gate lets no new test in while an
    ``alone`` test waits, so the others cannot keep it out."""
    alone = item.get_closest_marker("alone") is not None
    turns = Path(os.environ[ENV_TURNS])
    with open(turns / "gate", "w") as gate, open(turns / "turn", "w") as turn:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(turn, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        return (yield)  # the locks go with the files


@pytest.fixture(autouse=True)
def _english_after_each_test():
    """A request with a German ``Accept-Language`` leaves German active in its thread
    (``LocaleMiddleware`` activates it and nothing deactivates it), and the next test of the same
    process would print ``manage.py pgjobs``' messages in German: back to ``LANGUAGE_CODE``."""
    yield
    translation.deactivate()


@pytest.fixture
def admin_client(client, superuser):
    """A client logged in as ``superuser`` (admin_data.py), instead of pytest-django's own."""
    client.force_login(superuser)
    return client


@pytest.fixture
def other_connection() -> Iterator[psycopg.Connection]:
    """A second, independent connection (autocommit) to the test database. Never prepares a
    statement (psycopg would after 5 runs of one query): behind PgBouncer in transaction mode
    (pgbouncer_support.py) the next run could meet another server connection."""
    with psycopg.connect(database_url_for_tests(), autocommit=True, prepare_threshold=None) as conn:
        yield conn


@pytest.fixture
def start_worker(tmp_path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py runjobs`` subprocesses against the test database; all are killed at the
    end of the test."""
    with command_starter("runjobs", tmp_path) as start:
        yield start


@pytest.fixture
def own_postgresql_server(transactional_db) -> Iterator[Path]:
    """A PostgreSQL server for this test alone, for a test that restarts it: the other tests of a
    parallel run go on using the run's server. It holds this test's database, migrated; Django's
    connection, the workers ``start_worker`` starts and ``throwaway_pg.restart()`` use it until
    the end of the test. Yields its data directory."""
    if throwaway_pg.data_dir() is None:
        pytest.skip(
            "a server of its own needs the suite's throwaway server; DATABASE_URL was given"
        )
    port, data = throwaway_pg.start_another()
    try:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{connection.settings_dict["NAME"]}"')
        with pytest.MonkeyPatch.context() as patch:
            url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            patch.setenv("DATABASE_URL", url)
            patch.setenv(throwaway_pg.ENV_DATA, str(data))
            patch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
            patch.setitem(connection.settings_dict, "PORT", str(port))
            connection.close()
            call_command("migrate", verbosity=0)
            yield data
            connection.close()
    finally:
        throwaway_pg.stop_server(data)


def pytest_report_header(config) -> str:
    """Which PostgreSQL the run uses: CI runs the suite on two major versions."""
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        version = conn.info.server_version
    source = throwaway_pg.server_description() or "the server DATABASE_URL names"
    return f"PostgreSQL server {version // 10000}.{version % 10000}: {source}"


@pytest.fixture
def declared():
    """The recurring jobs of testproject/demo/recurring.py, declared for this test only."""
    from testproject.demo import recurring

    with registered_for_the_test(recurring.every_minute, recurring.daily_in_paris):
        yield recurring
