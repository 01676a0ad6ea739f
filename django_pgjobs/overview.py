"""What operators read: per-queue counts, rates and waits, dead-letter groups, live workers.

The admin dashboard, ``pgjobs/metrics`` and ``pgjobs/health`` all read through here, so they
show the same numbers. Every read runs a named statement of ``sql/queries.sql``; the per-minute
statistics come from the workers' counters (``django_pgjobs.metrics``).

Counting
    While pgjobs_job holds up to ``EXACT_COUNT_ROWS`` rows, every live job is counted. Above,
    counting a backlog on every page view would cost more than the page: running jobs and
    expired leases are still exact, retrying jobs exact up to ``COUNT_CAP`` per queue, due and
    scheduled jobs become the planner's estimates (shown with "≈"). Dead letters are counted up
    to ``COUNT_CAP`` per queue whatever the size of their table; those of the last hour exactly.

Rates
    Throughput is the jobs succeeded in the last ``THROUGHPUT_MINUTES`` minutes of statistics,
    the current one included, divided by the time those minutes span so far (4 min 30 s at
    half past the minute, not 5 min). The failure rate is failed attempts (retried or
    dead-lettered) over all finished attempts of the last hour.

Wait
    Percentiles of the last ``RECENT_MINUTES`` minutes, interpolated inside a bucket of
    ``metrics.WAIT_BUCKET_BOUNDS``.

Live workers
    A worker is alive while the registry heard from it within ``ALIVE_HEARTBEATS`` heartbeats
    (``HEARTBEAT_SECONDS``); it serves the queues its row names, or every queue (an empty list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from . import db, operations, sql
from .conf import get_config
from .metrics import WAIT_BUCKET_BOUNDS

RECENT_MINUTES = 15
THROUGHPUT_MINUTES = 5
#: Up to this many rows in pgjobs_job (planner estimate) the dashboard counts every live row;
#: above it, due and scheduled jobs are estimated (see ``queue_overview``).
EXACT_COUNT_ROWS = 200_000
#: Counts stop here and say "10,000+": matching rows of a list page, and per queue the retrying
#: jobs and dead letters of the dashboard.
COUNT_CAP = 10_000
CHART_MINUTES = 60
#: A worker heard from within this many heartbeats is alive.
ALIVE_HEARTBEATS = 3


def percentile(buckets: Sequence[int], fraction: float) -> float | None:
    """The ``fraction`` quantile of a wait histogram, interpolated linearly inside its bucket
    (``inf`` when it falls in the open last bucket, None without samples)."""
    total = sum(buckets)
    if not total:
        return None
    rank = fraction * total
    seen = 0
    for index, count in enumerate(buckets):
        if count and seen + count >= rank:
            if index >= len(WAIT_BUCKET_BOUNDS):
                return float("inf")
            low = WAIT_BUCKET_BOUNDS[index - 1] if index else 0.0
            high = WAIT_BUCKET_BOUNDS[index]
            return low + (high - low) * (rank - seen) / count
        seen += count
    return float("inf")


@dataclass
class QueueOverview:
    name: str
    paused: bool = False
    due: int = 0
    scheduled: int = 0
    retrying: int = 0
    running: int = 0
    lease_expired: int = 0
    estimated: bool = False  # due and scheduled are planner estimates (big table)
    retrying_capped: bool = False  # more than COUNT_CAP retrying jobs
    dead_letters: int = 0
    dead_letters_capped: bool = False  # more than COUNT_CAP dead letters
    dead_letters_last_hour: int = 0
    dead_letters_pruned_60m: int = 0  # deleted by retention in the last hour (pgjobs_stat)
    oldest_due: datetime | None = None
    oldest_due_seconds: float | None = None
    wait_p95: float | None = None
    wait_p99: float | None = None
    wait_samples: int = 0
    succeeded_5m: int = 0  # in the last THROUGHPUT_MINUTES minutes, the current one included
    throughput_seconds: float = THROUGHPUT_MINUTES * 60.0  # the time those minutes span
    succeeded_60m: int = 0
    failed_60m: int = 0
    per_minute: list[tuple[int, int]] = field(default_factory=list)  # (succeeded, failed)

    @property
    def live(self) -> int:
        return self.due + self.scheduled + self.retrying + self.running

    @property
    def throughput_per_minute(self) -> float:
        return self.succeeded_5m * 60 / self.throughput_seconds

    @property
    def failure_rate(self) -> float | None:
        attempts = self.succeeded_60m + self.failed_60m
        return self.failed_60m / attempts if attempts else None


def queue_overview(
    connection, dead_letters: bool = True, now: datetime | None = None
) -> tuple[list[QueueOverview], list[tuple[datetime, int, int]]]:
    """One ``QueueOverview`` per known queue, and the per-minute (succeeded, failed) of all
    queues over the last ``CHART_MINUTES`` (oldest first, empty minutes included).
    ``dead_letters=False`` leaves the dead-letter counts at 0 (not read); ``now`` (default: the
    current time) is the end of the statistics' windows."""
    queues: dict[str, QueueOverview] = {}

    def get(name: str) -> QueueOverview:
        if name not in queues:
            queues[name] = QueueOverview(name)
        return queues[name]

    names = operations.queue_names(connection)
    for name in names:
        get(name)
    for name in operations.paused_queues(connection):
        get(name).paused = True
    if table_row_estimates(connection).get("pgjobs_job", 0) <= EXACT_COUNT_ROWS:
        for row in db.execute(connection, "live_jobs_by_queue"):
            overview = get(row["queue"])
            for key in ("due", "scheduled", "retrying", "running", "lease_expired"):
                setattr(overview, key, row[key])
    else:
        _count_big_queues(connection, [get(name) for name in names])
    for name, (head_due, waited) in oldest_due(connection, names).items():
        overview = get(name)
        overview.oldest_due, overview.oldest_due_seconds = head_due, waited
    if dead_letters:
        params = {"queues": names, "cap": COUNT_CAP + 1}
        for row in db.execute(connection, "dead_letters_by_queue", params):
            overview = get(row["queue"])
            overview.dead_letters, overview.dead_letters_capped = capped(row["dead_letters"])
            overview.dead_letters_last_hour = row["dead_letters_last_hour"]

    chart, throughput_seconds = _read_statistics(connection, get, now or timezone.now())
    for overview in queues.values():
        overview.throughput_seconds = throughput_seconds
    ordered = [queues[name] for name in sorted(queues)]
    return ordered, chart


def oldest_due(connection, names: list[str]) -> dict[str, tuple[datetime, float]]:
    """For each of the queues ``names`` that has a due job: when its oldest due job became due,
    and the seconds since (by the database's clock)."""
    return {
        row["queue"]: (row["head_due"], (row["measured_at"] - row["head_due"]).total_seconds())
        for row in db.execute(connection, "queue_heads", {"queues": names})
    }


def queues_with_due_flow_jobs(connection, names: list[str]) -> list[str]:
    """Of the queues ``names``, those with a due job waiting on a flow key (which
    ``oldest_due`` leaves out): for the queues no worker serves only (it walks their jobs)."""
    if not names:
        return []
    return [
        row["queue"]
        for row in db.execute(connection, "queues_with_due_flow_jobs", {"queues": names})
    ]


def alive_seconds() -> float:
    """A worker heard from within this many seconds is alive."""
    return ALIVE_HEARTBEATS * get_config().HEARTBEAT_SECONDS


@dataclass(frozen=True)
class LiveWorker:
    id: str
    hostname: str
    queues: tuple[str, ...]  # empty: every queue

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


def live_workers(connection) -> list[LiveWorker]:
    """The workers alive now (``alive_seconds``), from the registry. A hand-made row whose
    queue list cannot be read serves no queue."""
    workers = []
    for row in db.execute(connection, "live_workers", {"alive_seconds": alive_seconds()}):
        queues = row["queues"]
        if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
            queues = ["(unreadable)"]
        workers.append(LiveWorker(row["id"], row["hostname"], tuple(queues)))
    return workers


def _read_statistics(connection, get, measured_at: datetime):
    """Add the workers' per-minute statistics to the overviews (``get(name)``): throughput, the
    last hour's successes and failures, the wait percentiles. Returns the chart's minutes
    (minute, succeeded, failed) of all queues, oldest first, empty minutes included, and the
    time the throughput's minutes span so far."""
    this_minute = measured_at.replace(second=0, microsecond=0)
    first_minute = this_minute - timedelta(minutes=CHART_MINUTES - 1)
    throughput_since = this_minute - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    throughput_seconds = (measured_at - throughput_since).total_seconds()
    chart = {first_minute + timedelta(minutes=i): [0, 0] for i in range(CHART_MINUTES)}
    waits: dict[str, list[int]] = {}
    rows = db.execute(connection, "queue_stats_since", {"since": first_minute})
    for row in rows:
        overview = get(row["queue"])
        age_minutes = (this_minute - row["minute"]).total_seconds() / 60
        failed = row["retried"] + row["dead_lettered"]
        overview.succeeded_60m += row["succeeded"]
        overview.failed_60m += failed
        overview.dead_letters_pruned_60m += row["pruned"]
        if age_minutes < THROUGHPUT_MINUTES:
            overview.succeeded_5m += row["succeeded"]
        if age_minutes < RECENT_MINUTES:
            merged = waits.setdefault(row["queue"], [0] * (len(WAIT_BUCKET_BOUNDS) + 1))
            for index, count in enumerate(row["wait_buckets"][: len(merged)]):
                merged[index] += count
        bar = chart.get(row["minute"])
        if bar is not None:
            bar[0] += row["succeeded"]
            bar[1] += failed
    for name, buckets in waits.items():
        overview = get(name)
        overview.wait_samples = sum(buckets)
        overview.wait_p95 = percentile(buckets, 0.95)
        overview.wait_p99 = percentile(buckets, 0.99)
    return [(minute, s, f) for minute, (s, f) in chart.items()], throughput_seconds


def _count_big_queues(connection, overviews: list[QueueOverview]) -> None:
    """Counts for a pgjobs_job too big to read whole on every page view: running jobs and
    expired leases exactly (the lease index holds running rows only), retrying jobs exactly up
    to ``COUNT_CAP`` per queue (their own partial index), due and scheduled jobs as the
    planner's estimates."""
    by_name = {overview.name: overview for overview in overviews}
    for row in db.execute(connection, "running_jobs_by_queue"):
        if row["queue"] in by_name:
            by_name[row["queue"]].running = row["running"]
            by_name[row["queue"]].lease_expired = row["lease_expired"]
    for overview in overviews:
        params = {"queue": overview.name, "cap": COUNT_CAP + 1}
        retrying = db.execute(connection, "retrying_jobs_in_queue", params)[0]["retrying"]
        overview.retrying, overview.retrying_capped = capped(retrying)
        overview.due = estimate_rows(connection, "due_jobs_in_queue", params)
        overview.scheduled = estimate_rows(connection, "scheduled_jobs_in_queue", params)
        overview.estimated = True


def capped(count: int) -> tuple[int, bool]:
    """A count made up to ``COUNT_CAP + 1`` as (count shown, True when there are more)."""
    return min(count, COUNT_CAP), count > COUNT_CAP


def estimate_rows(connection, name: str, params: dict[str, Any]) -> int:
    """How many rows the named statement would return, by the planner's estimate (EXPLAIN: the
    statement is planned, not run)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql.query(name), params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def table_row_estimates(connection) -> dict[str, int]:
    return {row["name"]: row["rows"] for row in db.execute(connection, "table_row_estimates")}


@dataclass
class DeadLetterGroup:
    error_type: str
    name: str
    last_hour: int
    last_day: int
    last_week: int
    latest: datetime | None
    reason: str = ""


def dead_letter_groups(connection, limit: int = 200) -> list[DeadLetterGroup]:
    """Dead letters of the last 7 days by (error type, job name), biggest first."""
    return [
        DeadLetterGroup(**row)
        for row in db.execute(connection, "dead_letter_groups", {"limit": limit})
    ]


def dead_letter_names(connection) -> list[str]:
    return [row["name"] for row in db.execute(connection, "dead_letter_names")]


def dead_letter_error_types(connection) -> list[str]:
    return [row["name"] for row in db.execute(connection, "dead_letter_error_types")]
