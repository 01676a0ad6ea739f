"""Waking the workers of a queue when a job is enqueued: NOTIFY with the INSERT in autocommit,
after the commit inside ``transaction.atomic()``, at most once per queue every
``NOTIFY_COALESCE_SECONDS`` per process (docs/explanation/notifications.md,
docs/explanation/notify-in-transactions.md). Used by ``enqueueing``.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connections

from . import db

#: Seconds during which a process sends at most one notification per queue: NOTIFY serializes
#: commits (docs/explanation/notifications.md, docs/explanation/notify-in-transactions.md).
NOTIFY_COALESCE_SECONDS = 0.01
#: When this process last delivered a notification, per (database alias, queue).
_last_notified: dict[tuple[str, str], float] = {}


def notified_recently(alias: str, queue: str) -> bool:
    """True when this process delivered a notification for ``queue`` less than
    NOTIFY_COALESCE_SECONDS ago: a job committed now is seen by the woken workers' next claim."""
    last = _last_notified.get((alias, queue), float("-inf"))
    return time.monotonic() - last < NOTIFY_COALESCE_SECONDS


def delivered(alias: str, queue: str) -> None:
    _last_notified[(alias, queue)] = time.monotonic()


def notify_after_commit(alias: str, queue: str) -> None:
    if not notified_recently(alias, queue):
        db.execute(connections[alias], "notify_queue", {"queue": queue})
        delivered(alias, queue)


def wake_after_commit(alias: str, queue: str):
    """The on_commit callback for one wake-up: a named function, not a functools.partial
    (Django 5.2 logs a failed robust callback by its ``__qualname__``, which a partial lacks, so
    the logging itself would raise out of the caller's commit)."""

    def wake_queue_after_commit() -> None:
        notify_after_commit(alias, queue)

    return wake_queue_after_commit


def wakes_after_commit(connection) -> bool:
    """Inside ``transaction.atomic()`` the wake-up goes out after the commit, not with the
    INSERT: a NOTIFY in the caller's transaction would hold the cluster-wide notify lock through
    its commit, so every such transaction would commit alone. Only when Django will run
    ``on_commit`` callbacks at that commit (not under manual transaction management)."""
    return connection.in_atomic_block and connection.commit_on_exit


def notify_in_statement(connection, params: dict[str, Any]) -> bool:
    """Whether the INSERT itself notifies. In autocommit it commits at once: skip when this
    process notified the queue less than NOTIFY_COALESCE_SECONDS ago. Under manual transaction
    management the notification is delivered at a commit that may come much later: always send
    it (PostgreSQL folds a transaction's identical notifications into one). A job that is not
    due now sends none (the SQL checks) and does not count."""
    if not connection.get_autocommit() or params["run_after"] is not None:
        return True
    return not notified_recently(connection.alias, params["queue"])
