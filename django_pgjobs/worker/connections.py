"""An executor thread's connection hygiene: every connection fit before a job, and back to
idle autocommit with the session Django configured after it.

What a job left open (a transaction, a changed session) is undone here and, for an open
transaction, charged to that job; a connection that died while idle is replaced before the next
job, and a job whose first statement met one is handed back without spending an attempt. See
``docs/explanation/worker.md``.
"""

from __future__ import annotations

import re
import select
import threading
from contextlib import ExitStack

from django.db import connections
from psycopg.pq import TransactionStatus

from ..operations import ClaimedJob
from .faults import CONNECTION_ERRORS
from .outcomes import ConnectionClosedByJob, RolledBack, TransactionLeftOpen


class ExecutorConnections:
    """One executor thread's database connections, made fit before each job and checked after
    it, as Django's request cycle does around a request (``close_old_connections``).

    Run by its executor thread only; the dispatcher reads ``job`` and ``backend_pids()`` to end
    the statements of a job it abandons. Costs nothing to a job that touches no database.
    """

    def __init__(self) -> None:
        self.wrappers = [connections[alias] for alias in connections]  # this thread's own
        self.job: ClaimedJob | None = None  # the job running now
        self._open_before: set[str] = set()  # aliases whose connection the job found open
        self._used: set[str] = set()  # aliases the job ran statements on
        self._session_changed = False
        self.stale_connection_failed = False
        self.thread = threading.current_thread()  # the executor's
        self.retired = False  # its job timed out: the thread exits once the job returns

    def observing(self) -> ExitStack:
        """Watch every statement of this thread's connections (see ``_observe``)."""
        stack = ExitStack()
        for wrapper in self.wrappers:
            stack.enter_context(wrapper.execute_wrapper(self._observe))
        return stack

    def before_job(self, job: ClaimedJob) -> None:
        """Close what the job must not get: a connection past ``CONN_MAX_AGE`` or broken
        (Django's checks), or one whose server already hung up while it sat idle."""
        for wrapper in self.wrappers:
            if wrapper.connection is None:
                continue
            try:
                wrapper.close_if_unusable_or_obsolete()  # also re-arms CONN_HEALTH_CHECKS
                if wrapper.connection is not None and _hung_up(wrapper.connection):
                    _discard(wrapper)
            except Exception:  # noqa: BLE001 - a connection we cannot check is not kept
                _discard(wrapper)
        self._open_before = {w.alias for w in self.wrappers if w.connection is not None}
        self._used.clear()
        self._session_changed = False
        self.stale_connection_failed = False
        self.job = job

    def after_job(self, where: str = "the job") -> TransactionLeftOpen | None:
        """Put every connection back to idle autocommit with the session Django set up; the
        error to charge the job with when it left a transaction open (rolled back here).
        ``where``: what returned, for that error's message."""
        self.job = None
        left_open = []
        for wrapper in self.wrappers:
            raw = wrapper.connection
            if raw is None:
                continue
            try:
                status = raw.info.transaction_status
                if wrapper.in_atomic_block or status not in (
                    TransactionStatus.IDLE,
                    TransactionStatus.UNKNOWN,
                ):
                    left_open.append(wrapper.alias)
                    _discard(wrapper)  # the server rolls back what the job left open
                elif status == TransactionStatus.UNKNOWN:  # closed or broken
                    _discard(wrapper)
                elif self._session_changed and wrapper.alias in self._used:
                    _discard(wrapper)  # a fresh session is the one Django configures
                else:
                    if not wrapper.get_autocommit():
                        wrapper.set_autocommit(True)  # off, but nothing pending: no harm done
                    wrapper.close_if_unusable_or_obsolete()
            except Exception:  # noqa: BLE001 - a connection we cannot check is not kept
                _discard(wrapper)
        if not left_open:
            return None
        return TransactionLeftOpen(
            f"{where} returned with its connection to database "
            f"{', '.join(map(repr, left_open))} inside a transaction (a raw BEGIN, "
            "transaction.set_autocommit(False) without a commit, or an atomic block never "
            "exited); what it left uncommitted was rolled back"
        )

    def backend_pids(self) -> dict[str, list[int]]:
        """The server processes of this executor's open connections, by alias (read by the
        dispatcher: a plain attribute read of another thread's connection)."""
        pids: dict[str, list[int]] = {}
        for wrapper in self.wrappers:
            raw = wrapper.connection
            try:
                pid = raw.info.backend_pid if raw is not None and not raw.closed else 0
            except Exception:  # noqa: BLE001 - closed meanwhile
                pid = 0
            if pid:
                pids.setdefault(wrapper.alias, []).append(pid)
        return pids

    def _observe(self, execute, sql, params, many, context):
        """Note statements that change the session, and whether the job's first statement on a
        connection it found open failed on that connection (it died while idle)."""
        alias = context["connection"].alias
        if not self._session_changed and isinstance(sql, str) and _SESSION_SQL.search(sql):
            self._session_changed = True
        if alias in self._used:
            return execute(sql, params, many, context)
        self._used.add(alias)
        try:
            return execute(sql, params, many, context)
        except CONNECTION_ERRORS:
            if alias in self._open_before:
                self.stale_connection_failed = True
            raise


# Statements that change a session past its transaction: SET (not SET LOCAL, SET TRANSACTION,
# SET CONSTRAINTS), RESET, DISCARD, set_config(). Over-matching costs one reconnection.
_SESSION_SQL = re.compile(
    r"^\s*(?:(?:set)\s+(?!local\b|transaction\b|constraints\b)|reset\b|discard\b)"
    r"|\bset_config\s*\(",
    re.IGNORECASE,
)


def _hung_up(raw) -> bool:
    """True when an idle connection's socket has something to read. An executor's connection
    never LISTENs, so that is the server's goodbye (terminated backend, idle_session_timeout,
    shutdown) or EOF: no round trip needed to see it."""
    if raw.closed or raw.broken:
        return True
    try:
        fd = raw.pgconn.socket
    except Exception:  # noqa: BLE001 - no socket: not usable
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


def _discard(wrapper) -> None:
    """Close a connection whatever state the job left it in; Django reconnects on next use
    (``connect()`` resets the transaction state)."""
    wrapper.in_atomic_block = False  # else close() keeps the dead connection for the block
    try:
        wrapper.close()
    except Exception:  # noqa: BLE001
        wrapper.connection = None


def check_transaction_kept(connection) -> None:
    """Raise when an atomic job's transaction can no longer carry its completion."""
    if connection.closed_in_transaction:
        raise ConnectionClosedByJob(
            "the job closed its database connection inside its atomic transaction "
            "(connection.close() or close_old_connections()), so its writes were rolled back "
            "and its completion cannot commit with them"
        )
    if connection.needs_rollback:
        raise RolledBack(
            "the job marked its transaction for rollback "
            "(transaction.set_rollback), so its completion cannot commit with it"
        )
