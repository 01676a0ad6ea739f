"""Database faults on the dispatcher's side: which errors are waited out, and how.

A "not right now" error (connection lost, server starting or shutting down, out of resources,
a lock or statement timeout, a read-only standby) is waited out with a doubling back-off and one
log line per wait; the failed step is then repeated, which is safe because a failed statement
changed nothing and every step is fenced by the claim token. Any other error is a bug and is
raised. See ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .outcomes import one_line
from .stopping import StopState

logger = logging.getLogger("django_pgjobs.worker")

T = TypeVar("T")

CONNECTION_ERRORS = (OperationalError, InterfaceError)
# By SQLSTATE class or code (PostgreSQL appendix A).
TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57P")  # connection, resources, operator intervention
TRANSIENT_SQLSTATES = frozenset(
    {
        "25006",  # read_only_sql_transaction: a hot standby, default_transaction_read_only
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available (lock_timeout)
        "57014",  # query_canceled (statement_timeout, pg_cancel_backend)
    }
)
FIRST_WAIT_SECONDS = 0.5
LONGEST_WAIT_SECONDS = 10.0


def is_transient(error: BaseException) -> bool:
    """A database error worth waiting out (see TRANSIENT_SQLSTATES)."""
    if isinstance(error, CONNECTION_ERRORS):  # psycopg's class for 08, 40, 53, 57P... too
        return True
    sqlstate = getattr(error.__cause__, "sqlstate", None) or ""
    return sqlstate in TRANSIENT_SQLSTATES or sqlstate.startswith(TRANSIENT_SQLSTATE_CLASSES)


def discard_if_broken(connection) -> None:
    """Close a connection that saw an error and no longer answers (Django reconnects lazily)."""
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False


def next_wait(previous: float) -> float:
    """The doubling back-off shared by every wait on the database."""
    return min(max(previous * 2, FIRST_WAIT_SECONDS), LONGEST_WAIT_SECONDS)


class DispatcherDatabase:
    """The dispatcher thread's connection (the jobs connection) and its waits on faults."""

    def __init__(self, alias: str, stop: StopState) -> None:
        self.alias = alias
        self.stop = stop
        #: duties kept up while a step waits for the database (``f(now)``: the liveness file)
        self.while_waiting: list[Callable[[float], object]] = []

    def connection(self):
        connection = connections[self.alias]
        discard_if_broken(connection)
        return connection

    def close(self) -> None:
        try:
            connections[self.alias].close()
        except DatabaseError:
            pass

    def with_retries(self, operation: Callable[[], T]) -> T:
        """Run a dispatcher database step, riding out connection loss (reconnect with backoff).

        Fenced steps are safe to repeat: a step that did commit before the connection dropped
        matches nothing the second time.
        """
        delay = FIRST_WAIT_SECONDS
        while True:
            try:
                return operation()
            except DatabaseError as error:
                if not is_transient(error) or self.stop.forced.is_set() or self.stop.past_give_up():
                    raise
                logger.warning(
                    "database unavailable (%s); retrying in %.1fs", one_line(error), delay
                )
                self.close()
                for duty in self.while_waiting:  # a step can wait for as long as the outage
                    duty(time.monotonic())
                self.stop.sleep(delay)
                delay = next_wait(delay)


class LoopBackoff:
    """The main loop's wait after a failed turn: doubles while the database stays away, and is
    reset by the first turn that succeeds."""

    def __init__(self) -> None:
        self.delay = 0.0

    @property
    def failing(self) -> bool:
        """The last turn failed on the database."""
        return self.delay > 0

    def reset(self) -> None:
        self.delay = 0.0

    def failed(self, error: DatabaseError) -> float:
        """Raise ``error`` unless it is worth waiting out; else the seconds to wait."""
        if not is_transient(error):
            raise error
        self.delay = next_wait(self.delay)
        return self.delay
