"""Queues (pause and resume) and the worker registry."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from .. import operations, registry
from ..conf import get_config
from . import display
from .base import OperatorAdmin, plural, refuse_mutation, safe_next


class QueueStateAdmin(OperatorAdmin):
    """Queues an operator paused or resumed. Pausing makes every worker's claim skip the queue;
    jobs already running finish. Queues never paused have no row here (see the dashboard)."""

    list_display = ("name", "paused", "changed_at")
    actions = ("pause", "resume")

    def get_urls(self):
        return [
            self.route("<str:name>/pause/", self.pause_view, "pause"),
            self.route("<str:name>/resume/", self.resume_view, "resume"),
            *super().get_urls(),
        ]

    def _set_paused(self, request, name: str, paused: bool):
        refused = refuse_mutation(self, request, "operate")
        if refused:
            return refused
        try:
            registry.check_queue(name)
        except ValueError:
            raise Http404("no such queue") from None
        operations.set_queue_paused(self.connection(), name, paused)
        messages.success(request, f"{'Paused' if paused else 'Resumed'} queue {name}.")
        dashboard = reverse(self.url_name("dashboard", model_name="job"))
        return HttpResponseRedirect(safe_next(request, dashboard))

    def pause_view(self, request, name):
        return self._set_paused(request, name, True)

    def resume_view(self, request, name):
        return self._set_paused(request, name, False)

    def _bulk(self, request, queryset, paused: bool):
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            operations.set_queue_paused(self.connection(), name, paused)
        verb = "Paused" if paused else "Resumed"
        messages.success(request, f"{verb} {plural(len(names), 'queue')}.")

    @admin.action(description="Pause selected queues", permissions=["operate"])
    def pause(self, request, queryset):
        self._bulk(request, queryset, True)

    @admin.action(description="Resume selected queues", permissions=["operate"])
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

    @admin.display(description="queues")
    def serves(self, obj):
        return ", ".join(obj.queues) or "all"

    @admin.display(description="up for")
    def up_for(self, obj):
        return display.duration((timezone.now() - obj.started_at).total_seconds())

    @admin.display(description="last seen")
    def last_seen(self, obj):
        return display.when(obj.last_seen_at)

    @admin.display(description="alive", boolean=True)
    def alive(self, obj):
        silent = (timezone.now() - obj.last_seen_at).total_seconds()
        return silent <= 3 * get_config().HEARTBEAT_SECONDS
