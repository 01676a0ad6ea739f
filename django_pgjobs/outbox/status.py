"""What the operator asks of the outbox: how many events wait, and since when (the admin and
``pgjobs/metrics`` read the same statement)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import db

#: Events and dead letters are counted up to this many (a count stays cheap at any size).
COUNT_CAP = 100_000


@dataclass(frozen=True)
class Backlog:
    events: int  # not yet published (up to COUNT_CAP)
    oldest_seconds: float | None  # age of the oldest of them; None: none
    dead_lettered: int  # refused by the broker (up to COUNT_CAP)


def backlog(connection) -> Backlog:
    (row,) = db.execute(connection, "outbox_backlog", {"cap": COUNT_CAP})
    return Backlog(row["events"], row["oldest_seconds"], row["dead_lettered"])
