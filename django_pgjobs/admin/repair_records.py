"""The repair records in the admin (``models.Repair``): every edit of a dead letter's arguments,
kept after the dead letter and the job it became are gone (docs/howto/repair.md).

Read-only: the edit's own statement writes them, the dead letters' retention prunes them; no
permission deletes one here. The arguments before and after are shown as a job's are: bounded,
the values of ``PGJOBS["REDACT_KEYS"]`` masked (by key, and positional ones by their parameter's
name), the whole value behind a link. What the job did afterwards is read from the tables when
the page is shown: the job while it waits, runs or is kept as successful, its dead letter when it
failed again, the next repair when that dead letter was edited in turn.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Q, Subquery
from django.http import Http404, HttpResponse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..models import DeadLetter, Job, Repair
from . import display, values
from .base import OperatorAdmin, require_view, row_id

#: The JSON columns of a record, never loaded through the ORM (``values``).
JSON_COLUMNS = ("args_before", "args", "kwargs_before", "kwargs")


def _kind(column: str) -> str:
    """``args`` or ``kwargs``: how a column's values are redacted (``values.redactor``)."""
    return "args" if column.startswith("args") else "kwargs"


class RepairAdmin(OperatorAdmin):
    list_display = (
        "record_id",
        "repaired",
        "repaired_by",
        "job_name",
        "edited_dead_letter",
        "original_job",
        "afterwards",
    )
    list_display_links = ("record_id",)
    ordering = ("-repaired_at", "-id")  # pgjobs_repair_at_idx
    search_fields = ("name",)  # replaced by get_search_results
    search_help_text = gettext_lazy(
        "A repair's id, the id the job had, the id it was requeued as, the dead letter's id, a job "
        "name (full or its function name), or who repaired it."
    )
    fieldsets = (
        (None, {"fields": ("id", "repaired", "repaired_by", "name", "queue")}),
        (
            gettext_lazy("Dead letter"),
            {"fields": ("edited_dead_letter", "original_job", "error_type", "reason")},
        ),
        (
            gettext_lazy("Arguments"),
            {"fields": ("args_before_shown", "args_shown", "kwargs_before_shown", "kwargs_shown")},
        ),
        (gettext_lazy("The requeued job"), {"fields": ("requeued_job", "afterwards")}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)
    repaired = display.time_field("repaired_at", gettext_lazy("repaired at"))

    def get_queryset(self, request):
        """The records, their JSON columns left out (a value can weigh a megabyte), with what
        became of each requeued job: its status while it is a job, its dead letter when it
        failed again, the repair of that dead letter (one probe each, by index)."""
        return (
            super()
            .get_queryset(request)
            .defer(*JSON_COLUMNS)
            .annotate(
                job_status=Subquery(
                    Job.objects.filter(pk=OuterRef("requeued_as")).order_by().values("status")[:1]
                ),
                dead_again=Subquery(
                    DeadLetter.objects.filter(job_id=OuterRef("requeued_as"))
                    .order_by("-id")
                    .values("id")[:1]
                ),
                repaired_again=Subquery(
                    Repair.objects.filter(job_id=OuterRef("requeued_as"))
                    .order_by("-id")
                    .values("id")[:1]
                ),
            )
        )

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        number = row_id(term)
        if number is not None:
            ids = Q(id=number) | Q(job_id=number) | Q(requeued_as=number)
            return queryset.filter(ids | Q(dead_letter_id=number)), False
        return queryset.filter(
            Q(name=term) | Q(name__endswith=f".{term}") | Q(repaired_by__icontains=term)
        ), False

    def get_object(self, request, object_id, from_field=None):
        pk = row_id(object_id)
        if pk is None:
            return None
        queryset = self.get_queryset(request).annotate(**values.preview_annotations(JSON_COLUMNS))
        return queryset.filter(pk=pk).first()

    def get_urls(self):
        return [
            self.route("<path:object_id>/value/<str:column>/", self.value_view, "value"),
            *super().get_urls(),
        ]

    def value_view(self, request, object_id, column):
        """The whole value of one JSON column of a record, redacted, as ``application/json``
        (the link under a long value); needs the page's view permission."""
        require_view(self, request)
        pk = row_id(object_id)
        if pk is None or column not in JSON_COLUMNS:
            raise Http404("no such value")
        found = self.rows().filter(pk=pk).values_list("name", values.stored_text(column)).first()
        if found is None:
            raise Http404("no such row")
        name, stored = found
        try:
            body = values.whole_value_text(stored, _kind(column), name)
        except ValueError:
            raise PermissionDenied("keys to redact may be inside, and it cannot be read") from None
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        response["Content-Disposition"] = f'inline; filename="repair-{pk}-{column}.json"'
        response["X-Content-Type-Options"] = "nosniff"
        return response

    # -- columns and fields ---------------------------------------------------------------------

    @admin.display(description=gettext_lazy("id"))
    def record_id(self, obj):
        return f"#{obj.id}"

    @admin.display(description=gettext_lazy("job name"))
    def job_name(self, obj):
        return display.short_name(obj.name)

    @admin.display(description=gettext_lazy("dead letter"))
    def edited_dead_letter(self, obj):
        return f"#{obj.dead_letter_id}"  # requeued by the edit: no page left to link to

    @admin.display(description=gettext_lazy("job id"))
    def original_job(self, obj):
        return f"#{obj.job_id}"

    @admin.display(description=gettext_lazy("requeued as"))
    def requeued_job(self, obj):
        return self._link("job", obj.requeued_as, obj.job_status is not None)

    @admin.display(description=gettext_lazy("afterwards"))
    def afterwards(self, obj):
        """What the requeued job did, as the tables tell now."""
        if obj.job_status is not None:
            return format_html(
                "{} {}",
                self._link("job", obj.requeued_as, True),
                display.badge(obj.job_status),
            )
        if obj.dead_again is not None:
            return format_html(
                "{} {}",
                _("dead-lettered again:"),
                self._link("deadletter", obj.dead_again, True, _("dead letter #%(id)s")),
            )
        if obj.repaired_again is not None:
            return format_html(
                "{} {}",
                _("dead-lettered again, then repaired again:"),
                self._link("repair", obj.repaired_again, True, _("repair #%(id)s")),
            )
        return _(
            "no longer in the jobs nor in the dead letters: it succeeded (or an operator "
            "cancelled it, or requeued or deleted its dead letter)"
        )

    def _link(self, model: str, pk: int, exists: bool, text: str = "") -> str:
        label = (text or _("job #%(id)s")) % {"id": pk}
        if not exists:
            return label
        return format_html(
            '<a href="{}">{}</a>', self.page_url("change", pk, model_name=model), label
        )

    @admin.display(description=gettext_lazy("args before"))
    def args_before_shown(self, obj):
        return self._json(obj, "args_before")

    @admin.display(description=gettext_lazy("args after"))
    def args_shown(self, obj):
        return self._json(obj, "args")

    @admin.display(description=gettext_lazy("kwargs before"))
    def kwargs_before_shown(self, obj):
        return self._json(obj, "kwargs_before")

    @admin.display(description=gettext_lazy("kwargs after"))
    def kwargs_shown(self, obj):
        return self._json(obj, "kwargs")

    def _json(self, obj, column: str) -> str:
        """A JSON column as a job's page shows its arguments (``values.Preview``)."""
        redact, needs_redaction = values.redactor(_kind(column), obj.name)
        head, total_bytes = json.loads(getattr(obj, f"{column}_preview"))
        preview = values.Preview.of(
            head,
            total_bytes,
            redact=redact,
            needs_redaction=needs_redaction,
            whole_text=lambda: (
                self.rows()
                .filter(pk=obj.pk)
                .values_list(values.stored_text(column), flat=True)
                .first()
            ),
        )
        return preview.html(self.page_url("value", obj.pk, column))
