"""The dashboard: one row per queue answering "is it keeping up?", the workers, a chart.

Every number comes from ``overview`` (named statements): live jobs per queue and
view, dead letters, the per-minute statistics workers record, and the worker registry. The page
needs ``view_job``; dead letters are shown only to users who may view them, and so are workers.
"""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.utils import timezone

from ..conf import get_config
from ..models import DeadLetter, QueueState, Worker
from . import display, overview
from .base import require_view
from .queues import with_queues_text

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
                "label": f"{display.local(minute):%H:%M}: {succeeded} succeeded, {failed} failed",
            }
        )
    return {"bars": bars, "peak": peak, "width": width, "height": height}


def dashboard_view(model_admin, request):
    require_view(model_admin, request)
    registered = model_admin.admin_site._registry

    def may(permission: str, model) -> bool:
        other = registered.get(model)
        return bool(other and getattr(other, f"has_{permission}_permission")(request))

    show_dead = may("view", DeadLetter)
    show_workers = may("view", Worker)
    connection = model_admin.connection()
    now = timezone.now()
    queues, points = overview.queue_overview(connection, dead_letters=show_dead, now=now)
    heartbeat = get_config().HEARTBEAT_SECONDS
    workers = []
    for worker in with_queues_text(model_admin.rows(Worker)) if show_workers else ():
        silent = (now - worker.last_seen_at).total_seconds()
        workers.append(
            {
                "worker": worker,
                "alive": silent <= 3 * heartbeat,
                "last_seen": display.relative(worker.last_seen_at, now),
                "up_for": display.duration((now - worker.started_at).total_seconds()),
                "queues": display.queue_list(worker.queues_text),
            }
        )
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
                    (view, count, round(100 * count / widest, 2), display.VIEW_COLOURS[view])
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
    totals = {
        key: sum(getattr(q, key) for q in queues)
        for key in ("due", "scheduled", "retrying", "running", "lease_expired", "dead")
    }
    context = model_admin.page_context(
        request,
        "Jobs dashboard",
        rows=rows,
        totals=totals,
        workers=workers,
        show_dead=show_dead,
        show_workers=show_workers,
        dead_capped=any(q.dead_capped for q in queues),
        count_cap=overview.COUNT_CAP,
        workers_alive=sum(1 for w in workers if w["alive"]),
        estimated=any(q.estimated for q in queues),
        chart=chart_bars(points),
        chart_minutes=overview.CHART_MINUTES,
        recent_minutes=overview.RECENT_MINUTES,
        estimates=overview.table_row_estimates(connection),
        can_pause=may("operate", QueueState),
        legend=[
            (view, display.VIEW_COLOURS[view])
            for view in ("due", "scheduled", "retrying", "running")
        ],
        measured_at=now,
    )
    return TemplateResponse(request, "admin/django_pgjobs/dashboard.html", context)
