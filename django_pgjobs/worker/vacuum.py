"""The jobs table's own vacuum: a maintenance unit that does not wait for autovacuum's minute.

Every job leaves two dead row versions in ``pgjobs_job`` (its claim's update and its delete),
and every claim steps over the dead index entries until a vacuum removes them. Autovacuum
looks at each database once per ``autovacuum_naptime`` (60 s by default): at 13,800 jobs/s
here that is 1.6 million dead versions between visits, and the claim falls behind
(docs/benchmarks.md, "Sustained load"). So every ``VACUUM_INTERVAL_SECONDS`` (10 s; None: off)
the worker reads the table's dead-tuple count (``pg_stat_user_tables``, one row) and, past
autovacuum's own threshold (``min_dead``, and ``scale`` of the live rows), runs
``VACUUM (SKIP_LOCKED) pgjobs_job`` on a thread and connection of its own, so the dispatcher
goes on claiming. ``SKIP_LOCKED``: a vacuum already running (autovacuum's, another worker's)
makes this one skip at once instead of waiting.

- A database user that may not vacuum the table (not its owner; PostgreSQL 17+: without
  ``MAINTAIN``) turns the unit off, logged once: autovacuum still runs.
- A vacuum that left the table past the threshold (a long transaction holds the xmin
  horizon, so the dead rows cannot go yet), or failed (logged), doubles the interval, up to ``max_backoff`` times; one
  that helps resets it.
- One worker's vacuum runs at a time; ``close()`` waits for it at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError, connections

from .faults import DispatcherDatabase
from .maintenance import MaintenanceUnit

logger = logging.getLogger("django_pgjobs.worker")

TABLE = "pgjobs_job"

DEAD_AND_LIVE = (
    "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables "
    "WHERE relid = to_regclass(%s) AND relid IS NOT NULL"
)
# The owner (or a member of its role, or a superuser) may vacuum; PostgreSQL 17 adds MAINTAIN.
MAY_VACUUM = (
    "SELECT CASE WHEN current_setting('server_version_num')::int >= 170000 "
    "THEN has_table_privilege(to_regclass(%s), 'MAINTAIN') "
    "ELSE pg_has_role(c.relowner, 'USAGE') END "
    "FROM pg_class AS c WHERE c.oid = to_regclass(%s)"
)


@dataclass(frozen=True)
class VacuumConfig:
    interval_seconds: float = 10.0  # VACUUM_INTERVAL_SECONDS
    min_dead: int = 10_000  # dead row versions below which no vacuum runs
    scale: float = 0.2  # ... nor below this fraction of the live rows (autovacuum's default)
    max_backoff: int = 30  # the interval grows at most this many times (300 s at 10 s)


@dataclass(frozen=True)
class VacuumRun:
    dead_before: int
    dead_after: int
    seconds: float


class TableVacuum(MaintenanceUnit):
    """Vacuums ``pgjobs_job`` when its dead rows pass the threshold; ``run_once()`` returns what
    it did: ``"off"`` (not allowed), ``"running"`` (the last one has not ended), ``"clean"``
    (below the threshold), or ``"started"``."""

    def __init__(self, db: DispatcherDatabase, config: VacuumConfig) -> None:
        self.db, self.config = db, config
        self.allowed: bool | None = None  # asked once, at the first run
        self.backoff = 1
        self.thread: threading.Thread | None = None
        self.last: VacuumRun | None = None  # the last vacuum that ended
        super().__init__()

    def interval(self) -> float:
        return self.config.interval_seconds * self.backoff

    def run_once(self) -> str:
        if self.thread is not None and self.thread.is_alive():
            return "running"
        with self.db.connection().cursor() as cursor:
            if self.allowed is None:
                cursor.execute(MAY_VACUUM, [TABLE, TABLE])
                row = cursor.fetchone()
                self.allowed = bool(row and row[0])
                if not self.allowed:
                    logger.info(
                        "the worker does not vacuum %s: its database user may not "
                        "(VACUUM_INTERVAL_SECONDS); autovacuum still does",
                        TABLE,
                    )
            if not self.allowed:
                return "off"
            cursor.execute(DEAD_AND_LIVE, [TABLE])
            row = cursor.fetchone()
        dead, live = (row[0], row[1]) if row else (0, 0)
        if not self.due(dead, live):
            self.backoff = 1
            return "clean"
        self.thread = threading.Thread(
            target=self._vacuum, args=(dead,), name="pgjobs-vacuum", daemon=True
        )
        self.thread.start()
        return "started"

    def due(self, dead: int, live: int) -> bool:
        """Past the threshold: autovacuum's own (its scale of the live rows), ``min_dead`` at
        least."""
        return dead >= max(self.config.min_dead, self.config.scale * live)

    def _vacuum(self, dead_before: int) -> None:
        """(The vacuum thread.) One ``VACUUM`` on this thread's own connection, closed after."""
        connection = connections[self.db.alias]
        started = time.monotonic()
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM (SKIP_LOCKED) {TABLE}")
                cursor.execute(DEAD_AND_LIVE, [TABLE])
                row = cursor.fetchone()
        except DatabaseError as error:  # said, and tried less often: it may be lasting
            logger.warning("could not vacuum %s: %s", TABLE, error)
            self.backoff = min(self.backoff * 2, self.config.max_backoff)
            return
        finally:
            try:
                connection.close()
            except DatabaseError:
                pass
        dead_after, live = (row[0], row[1]) if row else (0, 0)
        self.last = VacuumRun(dead_before, dead_after, time.monotonic() - started)
        # Still past the threshold: the rows are visible to a transaction yet (or the vacuum
        # was skipped); the next look would vacuum again for nothing: wait longer.
        if self.due(dead_after, live):
            self.backoff = min(self.backoff * 2, self.config.max_backoff)
        else:
            self.backoff = 1
        logger.debug(
            "vacuumed %s in %.2fs: %d dead row versions before, %d after",
            TABLE,
            self.last.seconds,
            dead_before,
            dead_after,
        )

    def close(self, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for a vacuum still running."""
        if self.thread is not None:
            self.thread.join(timeout)
