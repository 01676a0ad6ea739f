"""``pgjobs/metrics``: the operator's numbers in the Prometheus text format.

Needs ``prometheus_client`` (``pip install "django-pgjobs[prometheus]"``). Every value is read
from the database when Prometheus scrapes, through ``overview`` (the admin dashboard's reads),
so any web process answers for every worker host: no state in the process, no multiprocess
mode, nothing lost when a worker restarts. ``JobsCollector`` is a custom collector registered on
a ``CollectorRegistry`` of its own (never the process's default registry, which holds the
process's own metrics).

The series, their labels and how to alert on them: docs/howto/monitor.md. Windows (the last 5
minutes for throughput, the last hour for successes and failures, the last 15 minutes for
waits) and count caps are ``overview``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from . import overview
from .access import Reader
from .db import JobsTableMissing
from .outbox import status as outbox_status

logger = logging.getLogger("django_pgjobs")

#: The job views counted per queue (``states.View``), as the ``state`` label.
STATES = ("due", "scheduled", "retrying", "running")
QUANTILES = (("0.95", "wait_p95"), ("0.99", "wait_p99"))


def gauge(name: str, documentation: str, labels: tuple[str, ...] = ("queue",)):
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class JobsCollector(Collector):
    """Reads the numbers on each ``collect()``: one scrape, one pass over ``overview``."""

    def __init__(self, connection, reader: Reader, outbox: bool = True) -> None:
        self.connection, self.reader, self.outbox = connection, reader, outbox

    def collect(self) -> Iterator[Metric]:
        queues, _ = overview.queue_overview(self.connection, dead_letters=self.reader.dead_letters)
        yield from self._jobs(queues)
        yield from self._rates(queues)
        if self.reader.dead_letters:
            yield from self._dead_letters(queues)
        if self.reader.workers:
            yield from self._workers(queues)
        if self.outbox:
            yield from self._outbox()
        tables = gauge(
            "pgjobs_table_rows_estimated",
            "Rows of the table by the planner's estimate (updated by ANALYZE).",
            ("table",),
        )
        for table, rows in sorted(overview.table_row_estimates(self.connection).items()):
            tables.add_metric([table], rows)
        yield tables

    def _outbox(self) -> Iterator[Metric]:
        backlog = outbox_status.backlog(self.connection)
        yield GaugeMetricFamily(
            "pgjobs_outbox_backlog",
            f"Outbox events not yet published (counted up to {outbox_status.COUNT_CAP}).",
            value=backlog.events,
        )
        yield GaugeMetricFamily(
            "pgjobs_outbox_oldest_age_seconds",
            "Seconds the oldest unpublished outbox event has waited (0: none).",
            value=backlog.oldest_seconds or 0.0,
        )
        yield GaugeMetricFamily(
            "pgjobs_outbox_dead_letters",
            f"Outbox events the broker refused (counted up to {outbox_status.COUNT_CAP}).",
            value=backlog.dead_lettered,
        )

    def _jobs(self, queues) -> Iterator[Metric]:
        jobs = gauge(
            "pgjobs_jobs",
            f"Live jobs by state. Retrying jobs stop at {overview.COUNT_CAP}; due and scheduled "
            "are estimates while pgjobs_counts_estimated is 1.",
            ("queue", "state"),
        )
        oldest = gauge(
            "pgjobs_oldest_due_job_age_seconds",
            "Seconds the queue's oldest due job has waited since it became due (0: none due).",
        )
        expired = gauge(
            "pgjobs_leases_expired", "Running jobs whose lease expired (their worker is gone)."
        )
        paused = gauge("pgjobs_queue_paused", "1 while an operator has paused the queue.")
        for q in queues:
            for state in STATES:
                jobs.add_metric([q.name, state], getattr(q, state))
            oldest.add_metric([q.name], q.oldest_due_seconds or 0.0)
            expired.add_metric([q.name], q.lease_expired)
            paused.add_metric([q.name], int(q.paused))
        estimated = GaugeMetricFamily(
            "pgjobs_counts_estimated",
            "1 when due and scheduled jobs are the planner's estimates (a big pgjobs_job).",
            value=int(any(q.estimated for q in queues)),
        )
        yield from (jobs, oldest, expired, paused, estimated)

    def _rates(self, queues) -> Iterator[Metric]:
        throughput = gauge(
            "pgjobs_throughput_jobs_per_second",
            f"Jobs succeeded per second over the last {overview.THROUGHPUT_MINUTES} minutes.",
        )
        succeeded = gauge("pgjobs_succeeded_last_hour", "Jobs succeeded in the last hour.")
        failed = gauge(
            "pgjobs_failed_last_hour",
            "Failed attempts (retried or dead-lettered) in the last hour.",
        )
        wait = gauge(
            "pgjobs_wait_seconds",
            f"Time from due to claim over the last {overview.RECENT_MINUTES} minutes, by "
            "quantile (+Inf: above the highest bucket).",
            ("queue", "quantile"),
        )
        for q in queues:
            throughput.add_metric([q.name], q.throughput_per_minute / 60)
            succeeded.add_metric([q.name], q.succeeded_60m)
            failed.add_metric([q.name], q.failed_60m)
            if q.wait_samples:
                for quantile, field in QUANTILES:
                    wait.add_metric([q.name, quantile], getattr(q, field))
        yield from (throughput, succeeded, failed, wait)

    def _dead_letters(self, queues) -> Iterator[Metric]:
        dead = gauge(
            "pgjobs_dead_letters",
            f"Dead letters of the queue, counted up to {overview.COUNT_CAP}.",
        )
        last_hour = gauge("pgjobs_dead_letters_last_hour", "Jobs dead-lettered in the last hour.")
        pruned = gauge(
            "pgjobs_dead_letters_pruned_last_hour",
            "Dead letters deleted by retention (DEAD_LETTER_MAX_* settings) in the last hour.",
        )
        for q in queues:
            dead.add_metric([q.name], q.dead_letters)
            last_hour.add_metric([q.name], q.dead_letters_last_hour)
            pruned.add_metric([q.name], q.dead_letters_pruned_60m)
        yield from (dead, last_hour, pruned)

    def _workers(self, queues) -> Iterator[Metric]:
        workers = overview.live_workers(self.connection)
        yield GaugeMetricFamily(
            "pgjobs_workers_alive",
            "Worker processes heard from within three heartbeats.",
            value=len(workers),
        )
        serving = gauge("pgjobs_queue_workers_alive", "Live workers that serve the queue.")
        for q in queues:
            serving.add_metric([q.name], sum(1 for w in workers if w.serves(q.name)))
        yield serving


class EveryDatabaseCollector(Collector):
    """``JobsCollector`` on each jobs database (``PGJOBS["QUEUE_DATABASES"]``): with one, its
    series as they are; with several, every series of each database with a ``database`` label
    naming it (the outbox's of ``PGJOBS["DATABASE"]`` alone, where it lives)."""

    def __init__(self, databases: list[tuple[str, Any]], reader: Reader) -> None:
        self.databases, self.reader = databases, reader

    def collect(self) -> Iterator[Metric]:
        if len(self.databases) == 1:
            yield from JobsCollector(self.databases[0][1], self.reader).collect()
            return
        merged: dict[str, Metric] = {}
        up = GaugeMetricFamily(
            "pgjobs_database_up",
            "Whether the jobs database could be read for this scrape (1) or not (0: its series "
            "are missing from it).",
            labels=["database"],
        )
        failed: Exception | None = None
        read_one = False
        for index, (alias, connection) in enumerate(self.databases):
            try:  # all of a database's series, or none of them
                families = list(JobsCollector(connection, self.reader, outbox=index == 0).collect())
            except (DatabaseError, JobsTableMissing) as error:
                logger.warning("pgjobs/metrics: jobs database %r cannot be read: %s", alias, error)
                up.add_metric([alias], 0)
                failed = error
                continue
            up.add_metric([alias], 1)
            read_one = True
            for family in families:
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    into.add_sample(sample.name, {**sample.labels, "database": alias}, sample.value)
        if failed is not None and not read_one:
            raise failed  # not one database read: the scrape fails (503)
        yield from merged.values()
        yield up


def exposition(databases: list[tuple[str, Any]], reader: Reader, accept: str) -> tuple[bytes, str]:
    """The scrape's body and content type (the text format, or OpenMetrics when ``accept``
    asks for it), of each ``(alias, connection)`` of ``databases``, ``PGJOBS["DATABASE"]``
    first."""
    registry = CollectorRegistry()
    registry.register(EveryDatabaseCollector(databases, reader))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
