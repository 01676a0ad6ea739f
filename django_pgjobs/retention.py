"""Dead-letter retention: ``DEAD_LETTER_MAX_AGE_SECONDS`` and ``DEAD_LETTER_MAX_PER_NAME``.

The worker's ``Pruner`` (``worker/maintenance.py``) runs ``prune_dead_letters`` batch after
batch; each batch is one statement (``sql/queries.sql``: ``prune_dead_letters``) in its own
transaction, behind a transaction-level advisory lock tried inside it, so one worker prunes at a
time and no lock outlives a batch. See docs/howto/repair.md.
"""

from __future__ import annotations

from typing import NamedTuple

from . import db
from .operations import Connection


class PrunedDeadLetters(NamedTuple):
    held: bool  # False: another worker was pruning; nothing was deleted
    pruned: int


def prune_dead_letters(
    connection: Connection, max_age_seconds: float | None, max_per_name: int | None, limit: int
) -> PrunedDeadLetters:
    """Delete one batch (at most ``limit``) of dead letters older than ``max_age_seconds`` or
    beyond the newest ``max_per_name`` of their job name, counted in ``pgjobs_stat.pruned``."""
    params = {"max_age": max_age_seconds, "max_per_name": max_per_name, "limit": limit}
    row = db.execute(connection, "prune_dead_letters", params)[0]
    return PrunedDeadLetters(row["held"], row["pruned"])
