"""Flow control in the admin (docs/howto/flow-control.md): each key with its limits and their
current use (jobs running against the concurrency limit, tokens of the rate limit), how many jobs
wait on it, and the keys holding slots now. Read-only: the enqueues and the flow claim own the
rows; a key's slots are its running jobs, freed when they end (or are rescued)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..models import Job
from ..states import Status
from . import display
from .base import OperatorAdmin
from .databases import on_this_database


def _jobs_of_key(status: str) -> Coalesce:
    counted = (
        Job.objects.filter(flow_key=OuterRef("key"), status=status)
        .order_by()
        .values("flow_key")
        .annotate(n=Count("id"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


class HoldingSlotsFilter(admin.SimpleListFilter):
    title = gettext_lazy("slots")
    parameter_name = "slots"

    def lookups(self, request, model_admin):
        return [("held", _("holding slots (jobs running)")), ("waiting", _("jobs waiting"))]

    def queryset(self, request, queryset):
        if self.value() == "held":
            return queryset.filter(running__gt=0)
        if self.value() == "waiting":
            return queryset.filter(waiting__gt=0)
        return queryset


class FlowKeyAdmin(OperatorAdmin):
    list_display = ("key", "concurrency", "rate_limit", "waiting_jobs", "served", "due")
    list_filter = (HoldingSlotsFilter,)
    search_fields = ("key",)
    ordering = ("key",)
    readonly_fields = list_display

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(running=_jobs_of_key(Status.RUNNING), waiting=_jobs_of_key(Status.READY))
        )

    @admin.display(description=gettext_lazy("concurrency (running / limit)"))
    def concurrency(self, obj):
        limit = _("no limit") if obj.concurrency_limit is None else obj.concurrency_limit
        full = obj.concurrency_limit is not None and obj.running >= obj.concurrency_limit
        return format_html(
            '<span class="{}">{} / {}</span>', "pgjobs-expired" if full else "", obj.running, limit
        )

    @admin.display(description=gettext_lazy("rate limit (tokens)"))
    def rate_limit(self, obj):
        if obj.rate is None:
            return "–"
        tokens = obj.tokens
        if obj.refilled_at is not None:
            elapsed = max((timezone.now() - obj.refilled_at).total_seconds(), 0.0)
            tokens = min(obj.burst or 1.0, tokens + obj.rate * elapsed)
        return _("%(rate)s (%(tokens)s of %(burst)s now)") % {
            "rate": _per(obj.rate),
            "tokens": f"{tokens:.1f}",
            "burst": f"{obj.burst or 1:.0f}",
        }

    @admin.display(description=gettext_lazy("jobs waiting"))
    def waiting_jobs(self, obj):
        url = reverse("admin:django_pgjobs_job_changelist")
        return format_html(
            '<a href="{}">{}</a>',
            on_this_database(f"{url}?{urlencode({'q': obj.key})}"),
            obj.waiting,
        )

    served = display.time_field("last_served_at", gettext_lazy("last served"))
    due = display.time_field("ready_at", gettext_lazy("next looked at"))


def _per(rate: float) -> str:
    """Jobs per second as the ``rate_limit`` it was written with, roughly."""
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600)):
        if rate * seconds >= 1 - 1e-9:
            count = rate * seconds
            return (
                f"{count:g}/{unit}"
                if abs(count - round(count)) > 1e-6
                else f"{round(count)}/{unit}"
            )
    return f"{rate * 3600:g}/h"


def waiting_on_key(job) -> str:
    """A ready job's line under its badge when it waits on a flow key."""
    if job.flow_key is None or job.status != Status.READY:
        return ""
    url = reverse("admin:django_pgjobs_flowkey_changelist")
    return format_html(
        '<div class="pgjobs-small">{} <a href="{}">{}</a></div>',
        _("waits on key"),
        on_this_database(f"{url}?{urlencode({'q': job.flow_key})}"),
        job.flow_key,
    )


__all__ = ["FlowKeyAdmin", "HoldingSlotsFilter", "waiting_on_key"]
