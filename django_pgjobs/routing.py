"""Which database a job is written on: its queue's (``PGJOBS["QUEUE_DATABASES"]``, else
``PGJOBS["DATABASE"]``), and the rule enqueue follows when the caller's transaction is open on
another database than that one (docs/howto/databases.md).

A job commits with the transaction of the connection it is inserted on, and with no other: a
queue on a second database cannot be enqueued "inside" a transaction of the first. When queues
live on more than one database, an enqueue whose database has no transaction open while another
database of the thread is inside ``transaction.atomic()`` raises ``CrossDatabaseEnqueue``
(nothing written) instead of committing the job at once, on its own, whatever becomes of the
caller's transaction. With every queue on one database (no ``QUEUE_DATABASES``) nothing is
checked: enqueue behaves as it always has.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import TransactionManagementError

from .conf import get_config

__all__ = ["CrossDatabaseEnqueue", "enqueue_connection", "one_database"]


class CrossDatabaseEnqueue(TransactionManagementError):
    """An enqueue to a queue whose database has no transaction open, made inside
    ``transaction.atomic()`` of another database: refused, since the job would commit at once
    and stay if the caller's transaction rolled back."""


def enqueue_connection(queue: str) -> BaseDatabaseWrapper:
    """The connection a job of ``queue`` is inserted on; ``CrossDatabaseEnqueue`` when the
    caller is in a transaction of another database and none is open on that one."""
    config = get_config()
    if not config.QUEUE_DATABASES:  # one database: nothing to route, nothing to check
        return connections[config.DATABASE]
    alias = config.QUEUE_DATABASES.get(queue, config.DATABASE)
    _check_transactions(alias, f"queue {queue!r}")
    return connections[alias]


def one_database(queues: Iterable[str], what: str) -> BaseDatabaseWrapper:
    """The connection of jobs of several ``queues`` written by one statement (a workflow's
    steps): they must share a database. ``ValueError`` otherwise."""
    config = get_config()
    if not config.QUEUE_DATABASES:
        return connections[config.DATABASE]
    by_alias: dict[str, list[str]] = {}
    for queue in dict.fromkeys(queues):
        by_alias.setdefault(config.QUEUE_DATABASES.get(queue, config.DATABASE), []).append(queue)
    if len(by_alias) > 1:
        where = "; ".join(f"{', '.join(q)} on {a!r}" for a, q in by_alias.items())
        raise ValueError(
            f"{what} writes all its jobs in one transaction, so their queues must live on one "
            f"database (PGJOBS['QUEUE_DATABASES']), not {where}"
        )
    (alias,) = by_alias
    _check_transactions(alias, what)
    return connections[alias]


def _check_transactions(alias: str, what: str) -> None:
    if connections[alias].in_atomic_block:
        return
    for other in connections.all(initialized_only=True):
        if other.alias != alias and other.in_atomic_block:
            raise CrossDatabaseEnqueue(
                f"{what} lives on the database {alias!r}, which has no transaction open, but "
                f"this enqueue runs inside transaction.atomic() of {other.alias!r}: the job "
                f"would commit at once, and stay if that transaction rolled back. Enqueue it "
                f"inside transaction.atomic(using={alias!r}) to commit it with a transaction "
                f"of its own database, or after the commit: transaction.on_commit(lambda: ..., "
                f"using={other.alias!r}). docs/howto/databases.md"
            )
