"""``manage.py pgjobs prune``: what the workers' pruner deletes, at once, from a shell.

Successful jobs past their retention, finished workflows past theirs, then dead letters past
theirs, each as the worker's ``Pruner`` deletes them (``worker/maintenance.py``), taking turns
with a worker pruning dead letters at the same time. See docs/reference/pgjobs-command.md.
"""

from __future__ import annotations

import logging

from . import db, operations, retention
from .admin import display
from .admin.base import plural
from .conf import get_config
from .console import Outcome, connection

#: Most successful jobs one prune statement deletes (as the worker's pruner).
PRUNE_BATCH = 10_000
#: Longest a prune waits for its turn while a worker prunes dead letters (a batch at a time).
PRUNE_TURN_WAIT_SECONDS = 10.0

logger = logging.getLogger("django_pgjobs")


def prune(
    older_than: float | None = None, keep_per_name: int | None = None, dry_run: bool = False
) -> Outcome:
    """Delete the successful jobs kept past their retention, as the worker's pruner does
    (``KEEP_SUCCEEDED_SECONDS``, ``KEEP_RESULTS_SECONDS``), ``PRUNE_BATCH`` per statement; the
    finished workflows past theirs (``KEEP_WORKFLOWS_SECONDS``) in bounded batches; then the dead
    letters past theirs (``DEAD_LETTER_MAX_AGE_SECONDS`` or ``older_than``,
    ``DEAD_LETTER_MAX_PER_NAME`` or ``keep_per_name``), in the workers' batches
    (``retention.prune_in_batches``: logged, counted in ``pgjobs_stat.pruned``), taking turns
    with a worker pruning at the same time. ``dry_run``: count them (``count_prunable``),
    delete nothing."""
    config = get_config()
    conn = connection()
    if dry_run:
        return _count(older_than, keep_per_name)
    pruned = 0
    while True:
        deleted = operations.prune_succeeded(
            conn, config.KEEP_SUCCEEDED_SECONDS, config.KEEP_RESULTS_SECONDS, PRUNE_BATCH
        )
        pruned += deleted
        if deleted < PRUNE_BATCH:
            break
    workflows = retention.prune_workflows(conn, config.KEEP_WORKFLOWS_SECONDS, max_batches=10**9)
    message = f"Pruned {plural(pruned, 'successful job')} past their retention"
    if workflows.workflows:
        message += f", and {plural(workflows.workflows, 'finished workflow')}"
    message += "."
    pruned += workflows.workflows
    max_age = config.DEAD_LETTER_MAX_AGE_SECONDS if older_than is None else older_than
    max_per_name = config.DEAD_LETTER_MAX_PER_NAME if keep_per_name is None else keep_per_name
    if max_age is None and max_per_name is None:
        return Outcome(message, pruned)
    run = retention.prune_in_batches(
        conn,
        max_age,
        max_per_name,
        config.DEAD_LETTER_PRUNE_BATCH,
        log=logger,
        wait_seconds=PRUNE_TURN_WAIT_SECONDS,
    )
    message += f"\nPruned {plural(run.pruned, 'dead letter')} past their retention ("
    message += "; ".join(_retention_words(max_age, max_per_name)) + ")."
    if run.repairs and max_age is not None:
        message += f"\nPruned {plural(run.repairs, 'repair record')} made over {_age(max_age)} ago."
    if not run.finished:
        message += "\nStopped early: another process kept the dead letters' pruning; run again."
    return Outcome(message, pruned + run.pruned + run.repairs)


def _count(older_than: float | None, keep_per_name: int | None) -> Outcome:
    """What ``prune`` would delete now, in its words ("Would prune ...")."""
    config = get_config()
    max_age = config.DEAD_LETTER_MAX_AGE_SECONDS if older_than is None else older_than
    max_per_name = config.DEAD_LETTER_MAX_PER_NAME if keep_per_name is None else keep_per_name
    params = {
        "keep_seconds": config.KEEP_SUCCEEDED_SECONDS,
        "keep_results_seconds": config.KEEP_RESULTS_SECONDS,
        "keep_workflows_seconds": config.KEEP_WORKFLOWS_SECONDS,
        "max_age": max_age,
        "max_per_name": max_per_name,
    }
    row = db.execute(connection(), "count_prunable", params)[0]
    message = f"Would prune {plural(row['succeeded'], 'successful job')} past their retention"
    if row["workflows"]:
        message += f", and {plural(row['workflows'], 'finished workflow')}"
    message += "."
    if max_age is not None or max_per_name is not None:
        message += f"\nWould prune {plural(row['dead_letters'], 'dead letter')} past their "
        message += "retention (" + "; ".join(_retention_words(max_age, max_per_name)) + ")."
    if row["repairs"] and max_age is not None:
        message += f"\nWould prune {plural(row['repairs'], 'repair record')} made over "
        message += f"{_age(max_age)} ago."
    counted = row["succeeded"] + row["workflows"] + row["dead_letters"] + row["repairs"]
    return Outcome(message, counted, dry_run=True)


def _age(seconds: float) -> str:
    """``30 d``, ``12 h``, ``90 min`` when whole, else ``display.duration``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and not seconds % size:
            return f"{seconds / size:g} {unit}"
    return display.duration(seconds)


def _retention_words(max_age: float | None, max_per_name: int | None) -> list[str]:
    words = []
    if max_age is not None:
        words.append(f"failed over {_age(max_age)} ago")
    if max_per_name is not None:
        words.append(f"beyond the newest {max_per_name:,} per job name")
    return words
