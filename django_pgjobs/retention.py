"""Retention of dead letters (``DEAD_LETTER_MAX_AGE_SECONDS``, ``DEAD_LETTER_MAX_PER_NAME``), of
the repair records (``DEAD_LETTER_MAX_AGE_SECONDS`` after the edit, pruned with the dead letters)
and of finished workflows (``KEEP_WORKFLOWS_SECONDS``).

The worker's ``Pruner`` (``worker/maintenance.py``) and ``manage.py pgjobs prune`` run
``prune_dead_letters`` batch after batch (``prune_in_batches``); each batch is one statement (``sql/queries.sql``: ``prune_dead_letters``) in its own
transaction, behind a transaction-level advisory lock tried inside it, so one worker prunes at a
time and no lock outlives a batch. See docs/howto/repair.md. ``prune_workflows`` deletes finished
workflows the same way, batch after batch, workers skipping each other's rows (SKIP LOCKED); see
docs/howto/workflows.md.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from . import db
from .operations import Connection


class PrunedDeadLetters(NamedTuple):
    held: bool  # False: another worker was pruning; nothing was deleted
    pruned: int
    repairs: int = 0  # repair records (pgjobs_repair) past the same age, deleted with them


def prune_dead_letters(
    connection: Connection, max_age_seconds: float | None, max_per_name: int | None, limit: int
) -> PrunedDeadLetters:
    """Delete one batch (at most ``limit``) of dead letters older than ``max_age_seconds`` or
    beyond the newest ``max_per_name`` of their job name, counted in ``pgjobs_stat.pruned``, and
    (at most ``limit``) of the repair records older than ``max_age_seconds``."""
    params = {"max_age": max_age_seconds, "max_per_name": max_per_name, "limit": limit}
    row = db.execute(connection, "prune_dead_letters", params)[0]
    return PrunedDeadLetters(row["held"], row["pruned"], row["repairs_pruned"])


class PruneRun(NamedTuple):
    pruned: int
    finished: bool  # False: stopped at ``max_batches``, or while another process was pruning
    repairs: int = 0  # repair records past the dead letters' age, deleted with them


#: Seconds between two tries for the pruning's turn (another process's batch takes ~20 ms).
TURN_RETRY_SECONDS = 0.05


def prune_in_batches(
    connection: Connection,
    max_age_seconds: float | None,
    max_per_name: int | None,
    batch: int,
    *,
    log: logging.Logger,
    max_batches: int | None = None,
    wait_seconds: float = 0.0,
) -> PruneRun:
    """``prune_dead_letters`` batch after batch until none is left past retention, or
    ``max_batches`` ran, or another process held the pruning for ``wait_seconds`` in a row
    (0: stop at once, as a worker does: the one pruning goes on); logs how many were deleted
    on ``log``."""
    pruned = batches = repairs = 0
    finished = False
    waiting_since: float | None = None
    while max_batches is None or batches < max_batches:
        result = prune_dead_letters(connection, max_age_seconds, max_per_name, batch)
        if not result.held:
            now = time.monotonic()
            waiting_since = now if waiting_since is None else waiting_since
            if now - waiting_since >= wait_seconds:
                break
            time.sleep(TURN_RETRY_SECONDS)
            continue
        waiting_since = None
        batches += 1
        pruned += result.pruned
        repairs += result.repairs
        if result.pruned < batch and result.repairs < batch:
            finished = True
            break
    if pruned:
        log.info("pruned %d dead letters past their retention", pruned)
    if repairs:
        log.info("pruned %d repair records past the dead letters' retention", repairs)
    return PruneRun(pruned, finished, repairs)


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
