"""The dashboard: one row per queue answering "is it keeping up?", the workers, a chart.

Every number comes from ``overview`` (named statements): live jobs per queue and
view, dead letters, the per-minute statistics workers record, and the worker registry. The page
needs ``view_job``; dead letters are shown only to users who may view them, and so are workers.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from django.contrib import admin
from django.db import DatabaseError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from .. import db, overview, registry
from ..conf import job_databases
from ..models import DeadLetter, Job, QueueState, Worker
from ..states import view_label
from . import databases, display
from .base import require_view
from .queues import with_queues_text

logger = logging.getLogger("django_pgjobs.admin")

CHART_WIDTH = 600
CHART_HEIGHT = 120


def chart_bars(points, width: int = CHART_WIDTH, height: int = CHART_HEIGHT) -> dict:
    """Geometry of the throughput chart (stacked succeeded/failed bars per minute) for plain SVG."""
    peak = max((s + f for _, s, f in points), default=0)
    step = width / max(len(points), 1)
    bars = []
    for index, (minute, succeeded, failed) in enumerate(points):
        h_ok = round(height * succeeded / peak, 1) if peak else 0
        h_failed = round(height * failed / peak, 1) if peak else 0
        bars.append(
            {
                "x": round(index * step, 1),
                "width": max(round(step - 1, 1), 1),
                "ok_y": round(height - h_ok, 1),
                "ok_height": h_ok,
                "failed_y": round(height - h_ok - h_failed, 1),
                "failed_height": h_failed,
                "label": _("%(minute)s: %(succeeded)s succeeded, %(failed)s failed")
                % {
                    "minute": f"{display.local(minute):%H:%M}",
                    "succeeded": succeeded,
                    "failed": failed,
                },
            }
        )
    return {"bars": bars, "peak": peak, "width": width, "height": height}


def worker_rows(registered, now, known_queues: set[str]) -> list[dict]:
    """The dashboard's line of each registered worker (``registered``: Worker rows): alive
    (``overview.alive_seconds``), last seen, up for, the queues it serves, and those of them no
    job has used (not in ``known_queues``: a typo on ``runjobs --queue`` idles for ever)."""
    alive_within = overview.alive_seconds()
    workers = []
    for worker in with_queues_text(registered):
        silent = (now - worker.last_seen_at).total_seconds()
        workers.append(
            {
                "worker": worker,
                "alive": silent <= alive_within,
                "last_seen": display.when(worker.last_seen_at, now),
                "up_for": display.duration((now - worker.started_at).total_seconds()),
                "queues": display.queue_list(worker.queues_text),
                "unused": unused_queues(worker.queues_text, known_queues),
            }
        )
    return workers


def unused_queues(queues_text: str | None, known: set[str]) -> list[str]:
    """The queues a worker row names that are not in ``known`` (a hand-made row's unreadable
    list names none)."""
    try:
        names = json.loads(queues_text or "[]")
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
        return []
    if not isinstance(names, list):
        return []
    return [name for name in names if isinstance(name, str) and name not in known]


def queue_rows(queues) -> list[dict]:
    """The dashboard's line of each queue (``overview.QueueOverview``): its numbers as text and
    its backlog bar, scaled to the queue with the most live jobs."""
    widest = max((q.live for q in queues), default=0) or 1
    rows = []
    for queue in queues:
        rows.append(
            {
                "queue": queue,
                "oldest_due": display.duration(queue.oldest_due_seconds)
                if queue.oldest_due_seconds is not None
                else "–",
                "p95": display.duration(queue.wait_p95) if queue.wait_samples else "–",
                "p99": display.duration(queue.wait_p99) if queue.wait_samples else "–",
                "failure_rate": "–"
                if queue.failure_rate is None
                else f"{queue.failure_rate * 100:.1f} %",
                "bar": [
                    (
                        view_label(view),
                        count,
                        round(100 * count / widest, 2),
                        display.VIEW_COLOURS[view],
                    )
                    for view, count in (
                        ("due", queue.due),
                        ("scheduled", queue.scheduled),
                        ("retrying", queue.retrying),
                        ("running", queue.running),
                    )
                    if count
                ],
            }
        )
    return rows


@dataclass
class DatabasesRead:
    """What the dashboard reads of every jobs database, each row with its database's alias."""

    queues: list[tuple[str, overview.QueueOverview]] = field(default_factory=list)
    workers: list[dict] = field(default_factory=list)
    points: list[tuple] = field(default_factory=list)  # (minute, succeeded, failed), summed
    estimates: dict[str, int] = field(default_factory=dict)  # summed
    failing: list[tuple[str, str]] = field(default_factory=list)  # (alias, error) not read


def read_databases(show_dead: bool, show_workers: bool, now) -> DatabasesRead:
    """The dashboard's numbers of each jobs database (``PGJOBS["DATABASE"]`` and those of
    ``PGJOBS["QUEUE_DATABASES"]``): one page for all of them. With several, one that cannot
    be read (down, not migrated) is named in ``failing`` and the others are shown; with one,
    its error is the page's."""
    read = DatabasesRead()
    minutes: dict = {}
    aliases = job_databases()
    for alias in aliases:
        try:
            _read_database(read, minutes, alias, show_dead, show_workers, now)
        except (DatabaseError, db.JobsTableMissing) as error:
            if len(aliases) == 1:
                raise
            logger.warning("dashboard: jobs database %r cannot be read: %s", alias, error)
            read.failing.append((alias, display.one_line(str(error), 300)))
    read.points = [(minute, *minutes[minute]) for minute in sorted(minutes)]
    return read


def _read_database(read: DatabasesRead, minutes: dict, alias, show_dead, show_workers, now):
    """Add what the dashboard shows of the jobs database ``alias`` to ``read``: all of it, or
    nothing (read first, added after, so a database failing midway adds no half)."""
    connection = db.jobs_connection(alias)
    queues, points = overview.queue_overview(connection, dead_letters=show_dead, now=now)
    workers = []
    if show_workers:
        registered = Worker._default_manager.using(alias)
        in_use = registry.queues_in_use(connection)
        workers = [{**row, "database": alias} for row in worker_rows(registered, now, in_use)]
    estimates = overview.table_row_estimates(connection)
    read.queues += [(alias, queue) for queue in queues]
    for minute, succeeded, failed in points:
        before = minutes.get(minute, (0, 0))
        minutes[minute] = (before[0] + succeeded, before[1] + failed)
    read.workers += workers
    for table, rows in estimates.items():
        read.estimates[table] = read.estimates.get(table, 0) + (rows or 0)


def database_links(alias: str) -> dict[str, str]:
    """The query strings that keep a dashboard row's links on its database (empty with one):
    ``db_page`` starts a query, ``db_query`` extends one."""
    return {"db_page": databases.url_query(alias), "db_query": databases.url_query(alias, "&")}


def total_cards(read: DatabasesRead, estimated: bool, capped: bool) -> dict[str, dict]:
    """The dashboard's total cards (includes/card.html), each over every jobs database:
    ``total``, ``url`` (its list), ``approx``, ``alert``, ``capped``, and with several databases
    ``links``: (alias, count, its list on that database) of each database holding some. A list
    shows one database: a card linked to the list alone opened the session's database, which
    may hold none of what it counted."""
    lists = {
        "due": ("job", "view=due"),
        "scheduled": ("job", "view=scheduled"),
        "retrying": ("job", "view=retrying"),
        "running": ("job", "view=running"),
        "lease_expired": ("job", "view=lease_expired"),
        "dead_letters": ("deadletter", ""),
        "workers": ("worker", ""),
    }
    counts: dict[str, dict[str, int]] = {key: {} for key in lists}
    for alias, queue in read.queues:
        for key in lists:
            if key != "workers":
                counts[key][alias] = counts[key].get(alias, 0) + getattr(queue, key)
    for worker in read.workers:
        alias = worker["database"]
        counts["workers"][alias] = counts["workers"].get(alias, 0) + int(bool(worker["alive"]))
    cards = {}
    for key, (model, view) in lists.items():
        url = reverse(f"admin:django_pgjobs_{model}_changelist") + (f"?{view}" if view else "")
        total = sum(counts[key].values())
        links = None
        if databases.several():
            separator = "&" if view else "?"
            links = [
                (alias, count, url + databases.url_query(alias, separator))
                for alias, count in counts[key].items()
                if count
            ]
        cards[key] = {
            "total": total,
            "url": url,
            "links": links,
            "approx": estimated and key in ("due", "scheduled"),
            "alert": key in ("lease_expired", "dead_letters") and total > 0,
            "capped": capped and key == "dead_letters",
        }
    return cards


def dashboard_view(model_admin, request):
    require_view(model_admin, request)
    registered = model_admin.admin_site._registry

    def may(permission: str, model) -> bool:
        other = registered.get(model)
        return bool(other and getattr(other, f"has_{permission}_permission")(request))

    show_dead = may("view", DeadLetter)
    show_workers = may("view", Worker)
    now = timezone.now()
    read = read_databases(show_dead, show_workers, now)
    queues = [queue for _, queue in read.queues]
    rows = [
        {**row, "database": alias, **database_links(alias)}
        for row, (alias, _) in zip(queue_rows(queues), read.queues, strict=True)
    ]
    estimated = any(q.estimated for q in queues)
    context = model_admin.page_context(
        request,
        _("Jobs dashboard"),
        rows=rows,
        cards=total_cards(
            read, estimated=estimated, capped=any(q.dead_letters_capped for q in queues)
        ),
        workers=read.workers,
        several=databases.several(),
        show_dead=show_dead,
        show_workers=show_workers,
        count_cap=overview.COUNT_CAP,
        workers_alive=sum(1 for w in read.workers if w["alive"]),
        estimated=estimated,
        chart=chart_bars(read.points),
        chart_minutes=overview.CHART_MINUTES,
        recent_minutes=overview.RECENT_MINUTES,
        estimates=read.estimates,
        can_pause=may("operate", QueueState),
        legend=[
            (view_label(view), display.VIEW_COLOURS[view])
            for view in ("due", "scheduled", "retrying", "running")
        ],
        measured_at=now,
        failing=read.failing,
    )
    return TemplateResponse(request, "admin/django_pgjobs/dashboard.html", context)


class DashboardEntryAdmin(admin.ModelAdmin):
    """The "Dashboard" row of the admin index, the app's page and the sidebar (the proxy model
    ``Dashboard``): shown to whoever may see jobs, it leads to the jobs admin's dashboard."""

    def job_admin(self):
        return self.admin_site._registry[Job]

    def has_view_permission(self, request, obj=None) -> bool:
        return self.job_admin().has_view_permission(request)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_urls(self):
        view = self.admin_site.admin_view(self.changelist_view)
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", view, name=name)]

    def changelist_view(self, request, extra_context=None):
        require_view(self, request)
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_pgjobs_job_dashboard"))
