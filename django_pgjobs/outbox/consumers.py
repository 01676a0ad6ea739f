"""The consumer side: handle each event once, whatever the broker redelivers."""

from __future__ import annotations

from django.db import connections, transaction

from .. import db


def consume_once(event_id: int | str, consumer: str = "default", using: str = "default") -> bool:
    """Record that ``consumer`` handles event ``event_id`` (the message id) and say whether it
    is the first time. Call it first in the handler's ``transaction.atomic()`` block, and skip
    the event when it returns False::

        with transaction.atomic():
            if not consume_once(message_id, consumer="billing"):
                return  # a redelivery: already handled
            ...  # the handler's writes commit with the record

    If the handler's transaction rolls back, the record goes with it and a redelivery is
    handled again. ``using``: the database of the handler's writes (it needs the
    ``pgjobs_processed_event`` table: django_pgjobs in INSTALLED_APPS, migrated)."""
    connection = connections[using]
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError(
            "consume_once() must run inside the handler's transaction.atomic() block: the record "
            "has to commit or roll back with the handler's writes"
        )
    rows = db.execute(
        connection, "outbox_consume_once", {"consumer": consumer, "event_id": int(event_id)}
    )
    return bool(rows)
