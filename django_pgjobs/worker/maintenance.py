"""Periodic maintenance: small units the dispatcher runs between claims, like River's services.

Each unit does one duty. It is built from the dispatcher's database (``DispatcherDatabase``), a
frozen config whose defaults are the settings' defaults, and the few things its duty reads;
``run_once()`` does the duty once and returns its counts; ``next_due`` says when it runs again
(``interval()`` after the last run; ``first_delay()`` after start). The dispatcher runs the due
units from one list (``maintenance_units()``) on its own thread and connection; a unit whose
statement fails on a "not right now" error stays due and runs again after the loop's back-off.
Each unit can be run alone, without a ``Worker`` (``tests/test_worker_maintenance.py``).

The units, their intervals and what each does: ``docs/explanation/worker.md``.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import flow, metrics, operations, retention
from .faults import DispatcherDatabase
from .logs import log_stats
from .outcomes import Stats
from .state import DispatcherState

logger = logging.getLogger("django_pgjobs.worker")


class MaintenanceUnit:
    """One periodic duty: first due ``first_delay()`` after it is built (one ``interval()`` by
    default), then every ``interval()``. Subclasses set their fields before calling this
    ``__init__``."""

    def __init__(self) -> None:
        self.next_due = time.monotonic() + self.first_delay()

    def interval(self) -> float:
        raise NotImplementedError

    def first_delay(self) -> float:
        return self.interval()

    def run_once(self) -> object:
        """Do the duty once; returns its counts."""
        raise NotImplementedError

    def run_if_due(self, now: float) -> None:
        if now >= self.next_due:
            self.run_once()
            self.next_due = now + self.interval()


# -- the lease heartbeat ------------------------------------------------------------------------


@dataclass(frozen=True)
class HeartbeatConfig:
    interval_seconds: float = 10.0  # HEARTBEAT_SECONDS


@dataclass(frozen=True)
class HeartbeatCounts:
    extended: int = 0  # leases extended
    lost: int = 0  # jobs held here whose lease another worker has now
    abort_requested: int = 0  # held jobs newly marked abort requested


class LeaseHeartbeat(MaintenanceUnit):
    """Extends the leases of the held jobs within their time; passes on the aborts requested
    (``on_abort``: how a worker that does not LISTEN learns of them)."""

    def __init__(
        self,
        db: DispatcherDatabase,
        config: HeartbeatConfig,
        state: DispatcherState,
        on_abort: Callable[[Iterable[int]], int],
    ) -> None:
        self.db, self.config, self.state, self.on_abort = db, config, state, on_abort
        super().__init__()

    def interval(self) -> float:
        return self.config.interval_seconds

    def run_once(self) -> HeartbeatCounts:
        held = self.state.held
        now = time.monotonic()
        # a job past its timeout is not extended: its lease runs out even if the dispatcher
        # has not recorded the timeout yet (timeouts.py)
        jobs = [job for job in held.values() if job.deadline is None or job.deadline > now]
        if not jobs:
            return HeartbeatCounts()
        beat = operations.heartbeat(self.db.connection(), jobs)
        marked = self.on_abort(beat.abort_requested)
        # Only a row another claim holds is a lost lease. A job not extended and not taken has
        # ended here (an atomic job commits its completion on its own thread before the
        # dispatcher hears of it); its outcome, on its way, says the rest.
        lost = 0
        for job in jobs:
            if job.id in beat.taken and job.id in held:
                lost += 1
                logger.warning("lease of job %s #%s was lost (rescued elsewhere)", job.name, job.id)
        return HeartbeatCounts(extended=len(beat.kept), lost=lost, abort_requested=marked)


# -- the liveness file ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LivenessConfig:
    path: str  # runjobs --liveness-file
    interval_seconds: float = 10.0  # HEARTBEAT_SECONDS


class LivenessFile(MaintenanceUnit):
    """Touches ``config.path`` at start and every ``interval_seconds`` while the loop turns
    (waiting for the database included: the loop runs it before any statement, and a step
    that waits for the database runs it, ``DispatcherDatabase.while_waiting``), for a probe
    that reads its age without asking the database (``runjobs --liveness-file``;
    docs/howto/deploy.md). A file that cannot be written is logged, never fatal: the probe then
    fails, which says it. Returns whether it touched the file."""

    def __init__(self, config: LivenessConfig, database: DispatcherDatabase | None = None) -> None:
        self.config = config
        super().__init__()
        if database is not None:  # also while a step of the turn waits for the database
            database.while_waiting.append(self.run_if_due)

    def interval(self) -> float:
        return self.config.interval_seconds

    def first_delay(self) -> float:
        return 0.0

    def run_once(self) -> bool:
        try:
            with open(self.config.path, "a"):
                os.utime(self.config.path)
        except OSError as error:
            logger.warning("could not touch the liveness file %s: %s", self.config.path, error)
            return False
        return True


# -- the worker registry ------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryConfig:
    worker_id: str
    interval_seconds: float = 10.0  # HEARTBEAT_SECONDS
    # a worker silent this long is shown as gone, and its row deleted: 5 heartbeats or a lease
    forget_seconds: float = 60.0


class RegistryTouch(MaintenanceUnit):
    """Keeps the worker's ``pgjobs_worker`` row alive; forgets workers long silent. Returns how
    many it forgot."""

    def __init__(self, db: DispatcherDatabase, config: RegistryConfig) -> None:
        self.db, self.config = db, config
        super().__init__()

    def interval(self) -> float:
        return self.config.interval_seconds

    def run_once(self) -> int:
        config = self.config
        return operations.touch_worker(
            self.db.connection(), config.worker_id, forget_seconds=config.forget_seconds
        )


# -- rescue and prune ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RescueConfig:
    interval_seconds: float = 15.0  # RESCUE_INTERVAL_SECONDS
    jitter: float = 0.2  # each interval drawn within +-20%: workers started together spread out
    limit: int = 1000  # most jobs rescued per run


class AtStartThenJittered(MaintenanceUnit):
    """A unit that runs at start (what a crashed predecessor left) and then every
    ``config.interval_seconds``, each interval drawn within ``config.jitter``."""

    config: RescueConfig | PruneConfig

    def first_delay(self) -> float:
        return 0.0

    def interval(self) -> float:
        jitter = self.config.jitter
        return self.config.interval_seconds * random.uniform(1 - jitter, 1 + jitter)


class Rescuer(AtStartThenJittered):
    """Requeues (or dead-letters, out of attempts) the jobs whose lease expired; gives back the
    held ones that never started, attempt not spent."""

    def __init__(self, db: DispatcherDatabase, config: RescueConfig) -> None:
        self.db, self.config = db, config
        super().__init__()

    def run_once(self) -> operations.Rescued:
        rescued = operations.rescue(self.db.connection(), self.config.limit)
        if rescued.requeued or rescued.dead_lettered:
            logger.warning(
                "rescued %d job(s) with expired leases (%d requeued, %d dead-lettered)",
                rescued.requeued + rescued.dead_lettered,
                rescued.requeued,
                rescued.dead_lettered,
            )
        if rescued.returned_unstarted:
            logger.warning(
                "gave back %d held job(s) whose worker died before they started (attempt not "
                "spent)",
                rescued.returned_unstarted,
            )
        return rescued


@dataclass(frozen=True)
class DeadLetterRetention:
    max_age_seconds: float | None = None  # DEAD_LETTER_MAX_AGE_SECONDS
    max_per_name: int | None = None  # DEAD_LETTER_MAX_PER_NAME
    batch: int = 1000  # DEAD_LETTER_PRUNE_BATCH: rows per statement (one transaction)
    max_batches: int = 100  # per run: a backlog is worked off over several runs

    @property
    def on(self) -> bool:
        return self.max_age_seconds is not None or self.max_per_name is not None


@dataclass(frozen=True)
class PruneConfig:
    interval_seconds: float = 15.0  # RESCUE_INTERVAL_SECONDS
    jitter: float = 0.2
    keep_succeeded_seconds: float = 0.0  # KEEP_SUCCEEDED_SECONDS
    keep_results_seconds: float = 7 * 24 * 3600.0  # KEEP_RESULTS_SECONDS
    limit: int = 10_000  # most rows deleted per run
    dead_letters: DeadLetterRetention = DeadLetterRetention()
    keep_workflows_seconds: float = 7 * 24 * 3600.0  # KEEP_WORKFLOWS_SECONDS


class Pruner(AtStartThenJittered):
    """Deletes the successful jobs kept past their retention: ``keep_succeeded_seconds``, or
    ``keep_results_seconds`` for jobs that kept their result (always: those are kept whatever
    ``KEEP_SUCCEEDED_SECONDS`` says), the throttle windows past their end
    (``models.ThrottleWindow``), the flow keys idle for a day (``flow.prune_flow_keys``), the
    dead letters past their retention (``DEAD_LETTER_MAX_*`` settings: bounded batches, one
    worker at a time, ``operations.prune_dead_letters``), and the workflows finished
    ``keep_workflows_seconds`` ago (``retention.prune_workflows``, bounded batches). Returns how
    many rows it deleted."""

    def __init__(self, db: DispatcherDatabase, config: PruneConfig) -> None:
        self.db, self.config = db, config
        super().__init__()

    def run_once(self) -> int:
        config = self.config
        connection = self.db.connection()
        return (
            operations.prune_succeeded(
                connection, config.keep_succeeded_seconds, config.keep_results_seconds, config.limit
            )
            + operations.prune_throttle_windows(connection)
            + flow.prune_flow_keys(connection)
            + self.prune_dead_letters(connection)
            + self.prune_workflows(connection)
        )

    def prune_workflows(self, connection) -> int:
        pruned = retention.prune_workflows(connection, self.config.keep_workflows_seconds)
        if pruned.workflows:
            logger.info(
                "pruned %d finished workflows (and %d of their cancelled steps)",
                pruned.workflows,
                pruned.jobs,
            )
        return pruned.workflows + pruned.jobs

    def prune_dead_letters(self, connection) -> int:
        """Batches until none is left past retention, another worker holds the pruning, or
        ``max_batches`` ran; logs how many were deleted."""
        policy = self.config.dead_letters
        if not policy.on:
            return 0
        return retention.prune_in_batches(
            connection,
            policy.max_age_seconds,
            policy.max_per_name,
            policy.batch,
            log=logger,
            max_batches=policy.max_batches,
        ).pruned


# -- counts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsConfig:
    interval_seconds: float = metrics.FLUSH_SECONDS


class MetricsFlush(MaintenanceUnit):
    """Adds the worker's per-queue counts to ``pgjobs_stat`` (the admin dashboard's figures).
    Returns how many queues' counts it wrote."""

    def __init__(
        self, db: DispatcherDatabase, config: MetricsConfig, queue_metrics: metrics.QueueMetrics
    ) -> None:
        self.db, self.config, self.queue_metrics = db, config, queue_metrics
        super().__init__()

    def interval(self) -> float:
        return self.config.interval_seconds

    def run_once(self) -> int:
        return self.queue_metrics.maybe_flush(self.db.connection(), force=True)


@dataclass(frozen=True)
class StatsLogConfig:
    interval_seconds: float = 60.0  # runjobs --stats-interval


class StatsLog(MaintenanceUnit):
    """Logs the worker's summary line (``logs.log_stats``) and starts a new window. Returns
    the jobs finished in the window it closed."""

    def __init__(self, config: StatsLogConfig, stats: Stats) -> None:
        self.config, self.stats = config, stats
        super().__init__()

    def interval(self) -> float:
        return self.config.interval_seconds

    def run_once(self) -> int:
        finished = self.stats.window_finished
        log_stats(self.stats)
        return finished
