"""The scheduler: the maintenance unit that fires recurring jobs (``schedules.py``).

Every worker runs one; none leads. Each run looks once at the schedules due (one statement,
served by a partial index), fires each due time with one statement that inserts the fire row and
the job together (unique per schedule and fire time: a time another worker fired inserts
nothing), and says when to look again: at the next fire time, or after ``check_seconds`` at the
latest (for schedules added or changed in the admin). An idle worker thus runs one cheap
statement every ``check_seconds``. At start it also writes the schedules declared in code
(``@job(cron=...)``) as rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import cron, registry, schedules
from .faults import DispatcherDatabase
from .maintenance import MaintenanceUnit

logger = logging.getLogger("django_pgjobs.worker")


@dataclass(frozen=True)
class SchedulerConfig:
    check_seconds: float = 10.0  # longest wait between two looks
    misfire_grace_seconds: float = 60.0  # SCHEDULE_MISFIRE_GRACE_SECONDS
    keep_fires_seconds: float = 7 * 24 * 3600.0  # fire rows (the admin's history) kept
    prune_every_seconds: float = 3600.0
    limit: int = 100  # most schedules handled per look


@dataclass(frozen=True)
class SchedulerCounts:
    fired: int = 0  # jobs enqueued
    taken: int = 0  # fire times another worker had fired (or the schedule changed meanwhile)
    skipped: int = 0  # missed fire times left out by their schedule's catch_up
    unknown: int = 0  # due schedules whose job this worker does not know
    invalid: int = 0  # due schedules whose expression, time zone or arguments do not do
    synced: int = 0  # schedules declared in code written as rows (inserted or changed)
    held: int = 0  # fire times spent without a job: one holding its unique key was in flight


class Scheduler(MaintenanceUnit):
    """Fires the due schedules. ``clock``: the time to plan with (tests); None: the database's
    clock, read by the same statement that finds the due schedules."""

    def __init__(
        self,
        db: DispatcherDatabase,
        config: SchedulerConfig,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.db, self.config, self.clock = db, config, clock
        self.synced = False
        self.warned: set[int] = set()  # schedules whose unknown job or bad row was logged
        self.differing: set[tuple] = set()  # code rows seen differing from this declaration
        self.pruned_at = float("-inf")
        self.next_wake: dt.datetime | None = None  # the next fire time seen by the last look
        self.last_now: dt.datetime | None = None  # the clock of the last look
        self.more_due = False  # the last look found ``limit`` due schedules: look again at once
        super().__init__()

    def first_delay(self) -> float:
        return 0.0

    def interval(self) -> float:
        return self.config.check_seconds

    def run_if_due(self, now: float) -> None:
        if now >= self.next_due:
            self.run_once()
            self.next_due = now + self.wait_seconds()

    def wait_seconds(self) -> float:
        """Until the next fire time the last look saw, at most ``check_seconds``."""
        wait = self.config.check_seconds
        if self.more_due:
            return 0.0
        if self.next_wake is not None and self.last_now is not None:
            wait = min(wait, max(0.0, (self.next_wake - self.last_now).total_seconds()))
        return wait

    def run_once(self) -> SchedulerCounts:
        connection = self.db.connection()
        synced = 0
        if not self.synced:
            declared = [d for d in registry.registered().values() if d.cron is not None]
            clock = self.clock() if self.clock else None
            synced = sum(schedules.sync_declared(connection, declared, clock).values())
            self.synced = True
        found = schedules.due(connection, self.clock() if self.clock else None, self.config.limit)
        self.last_now, self.next_wake = found.now, found.next_wake
        self.more_due = len(found.schedules) >= self.config.limit
        counts = [self._handle_readable(row, found.now) for row in found.schedules]
        self._maybe_prune()
        fired, taken, skipped, unknown, invalid, held = (
            sum(c[i] for c in counts) for i in range(6)
        )
        result = SchedulerCounts(fired, taken, skipped, unknown, invalid, synced=synced, held=held)
        if logger.isEnabledFor(logging.DEBUG):  # runjobs -v 2
            logger.debug(
                "schedules looked at %s: %d due, %d fired, %d fired elsewhere",
                found.now.isoformat(),
                len(found.schedules),
                result.fired,
                result.taken,
            )
        return result

    def _handle_readable(self, row: dict, now: dt.datetime) -> tuple[int, ...]:
        """``_handle``, and (0, 0, 0, 0, 1) for a row the admin and ``@job`` would have refused
        (written by hand): logged once, the other schedules still fire."""
        try:
            return self._handle(row, now)
        except (ValueError, RuntimeError, StopIteration) as error:
            self._warn_once(row, "cannot be read (%s): not fired", error)
            # looked at again after check_seconds (fixed in the admin meanwhile, it fires), not
            # at every look: it would fill them, and the schedules behind it would never fire
            later = now + dt.timedelta(seconds=self.config.check_seconds)
            schedules.advance(self.db.connection(), row, later)
            return 0, 0, 0, 0, 1, 0

    def _warn_once(self, row: dict, message: str, *args) -> None:
        if row["id"] not in self.warned:
            self.warned.add(row["id"])
            logger.warning("schedule %r " + message, row["name"], *args)

    def _handle(self, row: dict, now: dt.datetime) -> tuple[int, ...]:
        """(fired, taken, skipped, unknown, invalid, held) for one due schedule."""
        connection = self.db.connection()
        try:
            definition = registry.get(row["job_name"])
        except registry.UnknownJobError:
            message = "names job %r, which this worker does not know: not fired (pgjobs.W002)"
            self._warn_once(row, message, row["job_name"])
            return 0, 0, 0, 1, 0, 0
        self._warn_if_declared_otherwise(row, definition)
        time_zone = schedules.time_zone_of(row["time_zone"])
        if row["next_fire_at"] is None:  # a row written by hand: start from now
            schedules.advance(connection, row, cron.next_after(row["cron"], time_zone, now))
            return 0, 0, 0, 0, 0, 0
        plan = cron.plan(
            row["cron"],
            time_zone,
            schedules.instant(row["next_fire_at"]),  # naive with USE_TZ = False
            now,
            row["catch_up"],
            self.config.misfire_grace_seconds,
        )
        if plan.skipped:
            logger.warning(
                "schedule %r: %s%d fire time(s) missed while no worker ran were skipped "
                "(catch_up=%d)",
                row["name"],
                "at least " if plan.skipped >= cron.COUNT_LIMIT else "",
                plan.skipped,
                row["catch_up"],
            )
        if self.next_wake is None or plan.next_fire < self.next_wake:
            self.next_wake = plan.next_fire
        problem = schedules.unfit(definition, row["args"], row["kwargs"]) if plan.fire else None
        if problem is not None:  # each job would be dead-lettered (BadArguments)
            self._warn_once(row, "has arguments that do not fit its job (%s): not fired", problem)
        if not plan.fire or problem is not None:
            schedules.advance(connection, row, plan.next_fire)
            return 0, 0, plan.skipped, 0, int(problem is not None), 0
        fired = held = 0
        for index, fire_time in enumerate(plan.fire):
            following = plan.fire[index + 1] if index + 1 < len(plan.fire) else plan.next_fire
            job_id = schedules.fire(connection, row, definition, fire_time, following)
            if job_id == schedules.SKIPPED:
                held += 1
                logger.info(
                    "schedule %r: fire time %s not enqueued, a job with its unique key is "
                    "ready or running",
                    row["name"],
                    fire_time.isoformat(),
                )
            elif job_id is not None:
                fired += 1
        return fired, len(plan.fire) - fired - held, plan.skipped, 0, 0, held

    def _warn_if_declared_otherwise(self, row: dict, definition) -> None:
        """A row declared in code that differs from this worker's declaration: written by a
        worker of another release (the last to start writes it). Said once per definition."""
        if row.get("source") != "code" or definition.cron is None:
            return
        if schedules.declared_values(definition.cron) == schedules.row_values(row):
            return
        key = (row["id"], row["changed_at"])
        if key not in self.differing:
            self.differing.add(key)
            logger.warning(
                "schedule %r: its row (cron %r, written by a worker of another release) differs "
                "from this worker's @job(cron=...) (%r): the row's definition fires",
                row["name"],
                row["cron"],
                definition.cron.expression,
            )

    def _maybe_prune(self) -> None:
        config, now = self.config, time.monotonic()
        if now - self.pruned_at >= config.prune_every_seconds:
            schedules.prune_fires(self.db.connection(), config.keep_fires_seconds)
            self.pruned_at = now
