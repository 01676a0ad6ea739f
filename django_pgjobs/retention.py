"""Retention of dead letters (``DEAD_LETTER_MAX_AGE_SECONDS``, ``DEAD_LETTER_MAX_PER_NAME``)
and of finished workflows (``KEEP_WORKFLOWS_SECONDS``).

The worker's ``Pruner`` (``worker/maintenance.py``) runs ``prune_dead_letters`` batch after
batch; each batch is one statement (``sql/queries.sql``: ``prune_dead_letters``) in its own
transaction, behind a transaction-level advisory lock tried inside it, so one worker prunes at a
time and no lock outlives a batch. See docs/howto/repair.md. ``prune_workflows`` deletes finished
workflows the same way, batch after batch, workers skipping each other's rows (SKIP LOCKED); see
docs/howto/workflows.md.
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


class PrunedWorkflows(NamedTuple):
    workflows: int
    jobs: int  # their steps that never ran (cancelled)


#: Most workflows one prune statement deletes (one transaction), and statements per run.
WORKFLOW_PRUNE_BATCH = 1000
WORKFLOW_PRUNE_MAX_BATCHES = 100


def prune_workflows(
    connection: Connection,
    keep_seconds: float,
    limit: int = WORKFLOW_PRUNE_BATCH,
    max_batches: int = WORKFLOW_PRUNE_MAX_BATCHES,
) -> PrunedWorkflows:
    """Delete the workflows finished more than ``keep_seconds`` ago with nothing left of them
    but cancelled steps (no job waiting, running or kept as successful, no dead letter), and
    those steps: batch after batch of ``limit``, at most ``max_batches``."""
    workflows = jobs = 0
    for _ in range(max_batches):
        params = {"keep_seconds": keep_seconds, "limit": limit}
        row = db.execute(connection, "prune_workflows", params)[0]
        workflows, jobs = workflows + row["workflows"], jobs + row["jobs"]
        if row["workflows"] < limit:
            break
    return PrunedWorkflows(workflows, jobs)
