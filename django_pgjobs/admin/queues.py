"""Queues (pause and resume) and the worker registry."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import db, operations
from ..conf import get_config
from . import display, values
from .base import OperatorAdmin, refuse_mutation, safe_next


class QueueStateAdmin(OperatorAdmin):
    """Queues an operator paused or resumed. Pausing makes every worker's claim skip the queue;
    jobs already running finish. Queues never paused have no row here (see the dashboard)."""

    list_display = ("name", "paused", "changed_at")
    actions = ("pause", "resume")

    def get_urls(self):
        # The queue's name is a POST field (the dashboard's buttons): a name can hold any text,
        # "/" or ".." included, which no URL path carries safely. The forms with the name in
        # the path stay for links built with it (names that fit a path).
        return [
            self.route("pause/", self.pause_view, "pause"),
            self.route("resume/", self.resume_view, "resume"),
            self.route("<path:name>/pause/", self.pause_view, "pause"),
            self.route("<path:name>/resume/", self.resume_view, "resume"),
            *super().get_urls(),
        ]

    def _set_paused(self, request, name: str | None, paused: bool):
        refused = refuse_mutation(self, request, "operate")
        if refused:
            return refused
        if name is None:
            name = request.POST.get("queue")
        try:
            set_queue_paused(self.connection(), name, paused)
        except ValueError:
            raise Http404("no such queue") from None
        done = _("Paused queue %(name)s.") if paused else _("Resumed queue %(name)s.")
        messages.success(request, done % {"name": name})
        dashboard = self.page_url("dashboard", model_name="job")
        return HttpResponseRedirect(safe_next(request, dashboard))

    def pause_view(self, request, name=None):
        return self._set_paused(request, name, True)

    def resume_view(self, request, name=None):
        return self._set_paused(request, name, False)

    def _bulk(self, request, queryset, paused: bool):
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            set_queue_paused(self.connection(), name, paused)
        if paused:
            done = ngettext("Paused %(n)s queue.", "Paused %(n)s queues.", len(names))
        else:
            done = ngettext("Resumed %(n)s queue.", "Resumed %(n)s queues.", len(names))
        messages.success(request, done % {"n": f"{len(names):,}"})

    @admin.action(description=gettext_lazy("Pause selected queues"), permissions=["operate"])
    def pause(self, request, queryset):
        self._bulk(request, queryset, True)

    @admin.action(description=gettext_lazy("Resume selected queues"), permissions=["operate"])
    def resume(self, request, queryset):
        self._bulk(request, queryset, False)


class WorkerAdmin(OperatorAdmin):
    """``runjobs`` processes alive now, kept by their heartbeats (read-only)."""

    list_display = (
        "id",
        "hostname",
        "pid",
        "serves",
        "concurrency",
        "up_for",
        "last_seen",
        "alive",
    )
    ordering = ("hostname", "pid")
    fields = ("id", "hostname", "pid", "serves", "concurrency", "started", "last_seen")
    readonly_fields = fields
    started = display.time_field("started_at", gettext_lazy("started at"))

    def get_queryset(self, request):
        return with_queues_text(super().get_queryset(request))

    @admin.display(description=gettext_lazy("queues"))
    def serves(self, obj):
        return display.queue_list(obj.queues_text)

    @admin.display(description=gettext_lazy("up for"))
    def up_for(self, obj):
        return display.duration((timezone.now() - obj.started_at).total_seconds())

    @admin.display(description=gettext_lazy("last seen"))
    def last_seen(self, obj):
        return display.when(obj.last_seen_at)

    @admin.display(description=gettext_lazy("alive"), boolean=True)
    def alive(self, obj):
        silent = (timezone.now() - obj.last_seen_at).total_seconds()
        return silent <= 3 * get_config().HEARTBEAT_SECONDS


def with_queues_text(workers):
    """Workers with their ``queues`` read as text (``queues_text``, for ``display.queue_list``):
    a hand-made row may hold JSON there that Python cannot read, which fails the ORM."""
    return workers.defer("queues").annotate(queues_text=values.stored_text("queues"))


def set_queue_paused(connection, name: str | None, paused: bool) -> None:
    """``operations.set_queue_paused``, which refuses a name ``enqueue()`` refuses, except for
    a queue some row already names (``a/b``, written around the API): pausing is how an
    operator stops it. Another such name raises ``ValueError``: a mistyped or forged name
    makes no new queue."""
    if isinstance(name, str) and name in operations.queue_names(connection):
        db.execute(connection, "set_queue_paused", {"name": name, "paused": paused})  # same SQL
    else:
        operations.set_queue_paused(connection, name, paused)
