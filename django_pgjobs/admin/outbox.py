"""The outbox in the admin: the events waiting for the relay (with the backlog and the oldest
event's age above the list) and the events the broker refused. Read-only: the relay owns the
events (docs/howto/outbox.md)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.db import connections, router
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import redaction
from ..outbox import status
from .base import OperatorAdmin


class RedactedPayload:
    """An event's page shows its payload and headers with the values of ``REDACT_KEYS``
    masked, as a job's arguments are (the raw columns are left out of the page)."""

    exclude = ("payload", "headers")
    readonly_fields = ("payload_shown", "headers_shown")

    @admin.display(description=gettext_lazy("payload"))
    def payload_shown(self, obj) -> str:
        return json.dumps(redaction.redact_value(obj.payload), ensure_ascii=False)

    @admin.display(description=gettext_lazy("headers"))
    def headers_shown(self, obj) -> str:
        return json.dumps(redaction.redact_value(obj.headers), ensure_ascii=False)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return _("none")
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class OutboxEventAdmin(RedactedPayload, OperatorAdmin):
    on_every_database = False  # the outbox lives on PGJOBS["DATABASE"] alone
    list_display = ("id", "topic", "key", "created_at", "attempts", "available_at", "last_error")
    list_filter = ()
    search_fields = ()
    ordering = ("id",)

    def changelist_view(self, request, extra_context=None):
        alias = router.db_for_read(self.model)
        backlog = status.backlog(connections[alias])
        capped = "+" if backlog.events >= status.COUNT_CAP else ""
        subtitle = _(
            "Backlog: %(events)s event(s) not yet published; oldest waiting %(age)s; "
            "%(refused)s refused by the broker"
        ) % {
            "events": f"{backlog.events:,}{capped}",
            "age": _age(backlog.oldest_seconds),
            "refused": f"{backlog.dead_lettered:,}",
        }
        return super().changelist_view(request, {**(extra_context or {}), "subtitle": subtitle})


class OutboxDeadLetterAdmin(RedactedPayload, OperatorAdmin):
    on_every_database = False
    list_display = ("id", "topic", "key", "created_at", "failed_at", "attempts", "error")
    ordering = ("-failed_at", "-id")
