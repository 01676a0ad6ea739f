"""The worker registry's rows (``pgjobs_worker``) and the server processes of its workers:
one named statement of ``sql/queries.sql`` each. Reached through ``operations``."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.db.backends.base.base import BaseDatabaseWrapper as Connection

from . import db


def register_worker(
    connection: Connection,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: Sequence[str] | None,
    concurrency: int,
) -> None:
    db.execute(
        connection,
        "register_worker",
        {
            "id": worker_id,
            "hostname": hostname,
            "pid": pid,
            "queues": json.dumps(list(queues or [])),
            "concurrency": concurrency,
        },
    )


def touch_worker(connection: Connection, worker_id: str, forget_seconds: float) -> int:
    """Mark the worker alive; forget the workers silent for ``forget_seconds`` (how many)."""
    params = {"id": worker_id, "forget_seconds": forget_seconds}
    return len(db.execute(connection, "touch_worker", params))


def unregister_worker(connection: Connection, worker_id: str) -> None:
    db.execute(connection, "unregister_worker", {"id": worker_id})


def cancel_backends(connection: Connection, pids: Sequence[int]) -> int:
    """Cancel the statements running on the server processes ``pids`` (a timed-out job's
    executor connections); how many were signalled."""
    if not pids:
        return 0
    return db.execute(connection, "cancel_backends", {"pids": list(pids)})[0]["cancelled"]


def terminate_backends(connection: Connection, pids: Sequence[int]) -> int:
    """End the server processes ``pids`` (a stopping worker's abandoned jobs); how many ended."""
    if not pids:
        return 0
    return db.execute(connection, "terminate_backends", {"pids": list(pids)})[0]["ended"]
