"""A private, throwaway PostgreSQL server for the test suite and the demo.

``database_url()`` returns ``DATABASE_URL`` when it is set. Otherwise it starts a server in a
temporary directory (on a free port of 127.0.0.1 and a socket in that directory), exports its
address as ``DATABASE_URL`` so every child process (``runjobs`` workers started by tests or by
the demo) talks to the same server, and stops and deletes it when the process that started it
exits.

PostgreSQL binaries are looked up in this order: ``$PGJOBS_PG_BIN``, the directory of
``pg_ctl`` on ``PATH``, ``/usr/lib/postgresql/<newest>/bin``, and the ``pgserver`` wheel from
PyPI (installed by the ``test`` extra on Python <= 3.12). PostgreSQL refuses to run as root, so
under root the server runs as the ``postgres`` user (or ``nobody``).

Tests that restart the server (the chaos suite) use ``restart()`` and ``data_dir()``; they are
only possible with a server this module started.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ENV_URL = "DATABASE_URL"
ENV_DATA = "PGJOBS_TEST_PGDATA"
ENV_BIN = "PGJOBS_PG_BIN"
ENV_OWNER_PID = "PGJOBS_TEST_PG_OWNER"


class PostgresNotFound(RuntimeError):
    pass


def find_bin_dir() -> Path:
    candidates: list[Path] = []
    if os.environ.get(ENV_BIN):
        candidates.append(Path(os.environ[ENV_BIN]))
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        candidates.append(Path(os.path.realpath(pg_ctl)).parent)
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in versions)
    try:
        import importlib.util

        spec = importlib.util.find_spec("pgserver")
        if spec and spec.origin:
            candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    except (ImportError, ValueError):
        pass
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    raise PostgresNotFound(
        "No PostgreSQL server binaries found for the throwaway test database. Either set "
        "DATABASE_URL to a PostgreSQL database you can create databases on, install PostgreSQL "
        "(initdb and pg_ctl), or `pip install pgserver` (Python <= 3.12)."
    )


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as when we are root, else None."""
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise PostgresNotFound("Running as root and neither a 'postgres' nor a 'nobody' user exists.")


def _demote(ids: tuple[int, int] | None):
    if ids is None:
        return None

    def preexec() -> None:
        os.setgid(ids[1])
        os.setuid(ids[0])

    return preexec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_ctl(*args: str) -> None:
    bin_dir = Path(os.environ[ENV_BIN])
    subprocess.run(
        [str(bin_dir / "pg_ctl"), *args],
        check=True,
        preexec_fn=_demote(_run_as()),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def start() -> str:
    bin_dir = find_bin_dir()
    ids = _run_as()
    base = Path(tempfile.mkdtemp(prefix="pgjobs-pg-"))
    data = base / "data"
    if ids:
        os.chown(base, *ids)
    subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ],
        check=True,
        preexec_fn=_demote(ids),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    port = _free_port()
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(
            "\n# throwaway server for django-pgjobs tests\n"
            f"port = {port}\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{base}'\n"
            "max_connections = 300\n"
            "fsync = off\n"
            "full_page_writes = off\n"
            "shared_buffers = 256MB\n"
            "max_locks_per_transaction = 256\n"
        )
    os.environ[ENV_BIN] = str(bin_dir)
    os.environ[ENV_DATA] = str(data)
    os.environ[ENV_OWNER_PID] = str(os.getpid())
    _pg_ctl("start", "-D", str(data), "-w", "-t", "60", "-l", str(base / "server.log"))
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    os.environ[ENV_URL] = url
    atexit.register(stop)
    return url


def stop() -> None:
    if os.environ.get(ENV_OWNER_PID) != str(os.getpid()):
        return
    data = Path(os.environ[ENV_DATA])
    try:
        _pg_ctl("stop", "-D", str(data), "-m", "immediate", "-w", "-t", "30")
    except subprocess.CalledProcessError:
        pass
    shutil.rmtree(data.parent, ignore_errors=True)


def data_dir() -> Path | None:
    """The data directory of the throwaway server, or None when DATABASE_URL was given."""
    value = os.environ.get(ENV_DATA)
    return Path(value) if value else None


def restart(mode: str = "fast", pause_seconds: float = 0.0) -> None:
    """Stop the throwaway server (``mode``: fast or immediate), wait, and start it again."""
    data = data_dir()
    if data is None:
        raise RuntimeError("restart() needs the throwaway server; DATABASE_URL was given")
    _pg_ctl("stop", "-D", str(data), "-m", mode, "-w", "-t", "60")
    time.sleep(pause_seconds)
    _pg_ctl("start", "-D", str(data), "-w", "-t", "60", "-l", str(data.parent / "server.log"))


def database_url() -> str:
    return os.environ.get(ENV_URL) or start()
