"""A private PgBouncer in front of the test run's PostgreSQL server, in transaction pooling mode
(docs/howto/deploy.md#pgbouncer).

``PgBouncer.start(server_port, directory)`` writes a configuration that routes every database
name to that server (``* = host=127.0.0.1 port=...``, so pytest-xdist's per-worker test databases
are reached too), starts ``pgbouncer`` on a free port of 127.0.0.1 and waits until it answers.
Under root it runs as the user the throwaway server runs as (PgBouncer refuses root). The
binary: ``$PGJOBS_PGBOUNCER`` or ``pgbouncer`` on ``PATH`` or ``/usr/sbin/pgbouncer`` (Debian's
package installs it there); ``.ci/run`` installs it.

Fixtures (a plugin of tests/conftest.py):

- ``pgbouncer``: one PgBouncer per test process, skipped when none is installed (a failure with
  ``PGJOBS_REQUIRE_PGBOUNCER=1``, as in CI);
- ``through_pgbouncer``: for one transactional test, Django's connections, the workers
  ``start_worker`` starts and ``other_connection`` go through it, with the documented settings
  (``LISTEN_NOTIFY`` and ``PREPARED_STATEMENTS`` off: PgBouncer before 1.21);
- with ``PGJOBS_TEST_PGBOUNCER=1`` the whole run goes through it (``.ci/run`` runs the worker,
  enqueue and admin modules so); testproject/settings.py then turns both settings off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from django.db import connections

from testproject import throwaway_pg

SETTINGS = """\
[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 500
default_pool_size = 40
max_db_connections = 80
server_lifetime = 30
server_idle_timeout = 5
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def binary() -> str | None:
    """The pgbouncer to run, or None when none is installed."""
    found = os.environ.get("PGJOBS_PGBOUNCER") or shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


@dataclass
class PgBouncer:
    port: int
    process: subprocess.Popen
    directory: Path

    @classmethod
    def start(cls, server_port: int, directory: Path) -> PgBouncer:
        executable = binary()
        if executable is None:
            raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
        port = throwaway_pg._free_port()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "users.txt").write_text('"postgres" ""\n')
        config = directory / "pgbouncer.ini"
        config.write_text(SETTINGS.format(server_port=server_port, port=port, directory=directory))
        ids = throwaway_pg._run_as()
        if ids is not None:
            for path in (directory, *directory.iterdir()):
                os.chown(path, *ids)
        process = subprocess.Popen(
            [executable, str(config)],
            preexec_fn=throwaway_pg._demote(ids),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        bouncer = cls(port, process, directory)
        bouncer._wait_until_ready()
        return bouncer

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _wait_until_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start:\n{self.log()}")
            try:
                with psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def show(self, what: str) -> list[dict]:
        """A ``SHOW`` of the admin console (``STATS``, ``POOLS``...) as dicts."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
            cursor = conn.execute(f"SHOW {what}", prepare=False)
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def transactions(self, database: str) -> int:
        """Transactions PgBouncer has carried to ``database`` so far."""
        stats = {row["database"]: row for row in self.show("STATS")}
        row = stats.get(database)
        return int(row["total_xact_count"]) if row else 0

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- fixtures -----------------------------------------------------------------------------------

WHOLE_RUN = os.environ.get("PGJOBS_TEST_PGBOUNCER") == "1"


def _start_in_front_of_the_server() -> tuple[PgBouncer, str]:
    """A PgBouncer in front of the server of ``DATABASE_URL``; with that URL."""
    if binary() is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("PGJOBS_REQUIRE_PGBOUNCER") == "1" or WHOLE_RUN:
            pytest.fail(message)
        pytest.skip(message)
    server_url = os.environ["DATABASE_URL"]
    directory = Path(tempfile.mkdtemp(prefix="pgjobs-pgbouncer-"))
    return PgBouncer.start(urlsplit(server_url).port or 5432, directory), server_url


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup) -> Iterator[PgBouncer]:
    """Stopped before the test database is dropped: its server connections would keep it."""
    bouncer, _ = _start_in_front_of_the_server()
    yield bouncer
    bouncer.stop()
    shutil.rmtree(bouncer.directory, ignore_errors=True)


def _route(bouncer: PgBouncer, patch: pytest.MonkeyPatch) -> None:
    """Django's connections and ``DATABASE_URL`` (what ``start_worker`` and ``other_connection``
    use) through ``bouncer``; the documented settings in this process and in workers."""
    patch.setenv("DATABASE_URL", bouncer.url("postgres"))
    patch.setenv("PGJOBS_TEST_PGBOUNCER", "1")  # worker processes: testproject/settings.py
    for alias in connections:
        patch.setitem(connections[alias].settings_dict, "HOST", "127.0.0.1")
        patch.setitem(connections[alias].settings_dict, "PORT", str(bouncer.port))
        connections[alias].close()


@pytest.fixture
def through_pgbouncer(pgbouncer, transactional_db, settings) -> Iterator[PgBouncer]:
    """This test's connections through ``pgbouncer`` (see the module docstring)."""
    settings.PGJOBS = {**settings.PGJOBS, "LISTEN_NOTIFY": False, "PREPARED_STATEMENTS": False}
    with pytest.MonkeyPatch.context() as patch:
        _route(pgbouncer, patch)
        yield pgbouncer
        connections.close_all()


def pytest_runtest_setup(item) -> None:
    if WHOLE_RUN and item.get_closest_marker("listen_notify"):
        pytest.skip("LISTEN/NOTIFY is off behind PgBouncer in transaction mode")


@pytest.fixture(scope="session", autouse=WHOLE_RUN)
def _whole_run_through_pgbouncer(request) -> Iterator[None]:
    """``PGJOBS_TEST_PGBOUNCER=1``: every test's connections through a PgBouncer. The test
    database is made (and dropped) directly on the server; only the tests go through it."""
    if not WHOLE_RUN:
        yield
        return
    request.getfixturevalue("django_db_setup")
    bouncer, _ = _start_in_front_of_the_server()
    with pytest.MonkeyPatch.context() as patch:
        _route(bouncer, patch)
        yield
        connections.close_all()
    bouncer.stop()  # its server connections go: the test database can be dropped
    shutil.rmtree(bouncer.directory, ignore_errors=True)
