"""Dead letters: the list, the page of one, the summary by error and job, requeue and delete."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Q
from django.db.models.functions import Left
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import overview
from . import confirm, databases, display, repairs
from .actions import DEAD_LETTER_ACTIONS, Action, bulk_actions
from .base import (
    CappedChangeList,
    JobRowAdmin,
    QueueFilter,
    ValueFilter,
    require_view,
)
from .workflows import workflow_link

LIST_FIELDS = (
    "id",
    "job_id",
    "name",
    "queue",
    "attempts",
    "max_attempts",
    "error_type",
    "failed_at",
)
GONE = repairs.GONE


class FailedWithinFilter(admin.SimpleListFilter):
    title = gettext_lazy("died within")
    parameter_name = "within"
    WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}

    def lookups(self, request, model_admin):
        return [
            ("1h", _("the last hour")),
            ("24h", _("the last 24 hours")),
            ("7d", _("the last 7 days")),
        ]

    def queryset(self, request, queryset):
        window = self.WINDOWS.get(self.value())
        return queryset.filter(failed_at__gt=timezone.now() - window) if window else queryset


class ErrorTypeFilter(ValueFilter):
    title = gettext_lazy("error type")
    parameter_name = field = "error_type"
    values_from = staticmethod(overview.dead_letter_error_types)


class NameFilter(ValueFilter):
    title = gettext_lazy("job name")
    parameter_name = field = "name"
    values_from = staticmethod(overview.dead_letter_names)


class DeadLetterChangeList(CappedChangeList):
    def get_queryset(self, request, exclude_parameters=None):
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.only(*LIST_FIELDS).annotate(reason_start=Left("reason", 300))


class DeadLetterAdmin(JobRowAdmin):
    list_display = (  # the key columns first: why it died, after how many attempts, when
        "dead_letter_id",
        "job_name",
        "error_type",
        "short_reason",
        "attempts_of_max",
        "died",
        "queue",
        "original_job",
    )
    list_display_links = ("dead_letter_id",)
    list_filter = (FailedWithinFilter, ErrorTypeFilter, NameFilter, QueueFilter)
    ordering = ("-failed_at", "-id")  # pgjobs_dl_failed_idx
    search_fields = ("name",)  # replaced by get_search_results
    search_help_text = gettext_lazy(
        "A dead letter id, the id the job had, a job name (full or its function name), an error "
        "type or a unique key."
    )
    actions = (
        *bulk_actions(DEAD_LETTER_ACTIONS),
        admin.action(
            description=gettext_lazy("Replay selected dead letters over time (at a rate)"),
            permissions=["operate"],
        )(repairs.replay_over_time),
    )
    row_actions = DEAD_LETTER_ACTIONS
    dead_letters = True
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "job_id",
                    "name",
                    "queue",
                    "priority",
                    "unique_key",
                    "workflow_page",
                )
            },
        ),
        (
            gettext_lazy("Failure"),
            {"fields": ("reason", "error_type", "attempts_of_max", "created", "failed")},
        ),
        (gettext_lazy("Arguments"), {"fields": ("arguments", "keyword_arguments")}),
        (gettext_lazy("Repairs"), {"fields": ("repair_trail",)}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)
    failed = display.time_field("failed_at", gettext_lazy("failed at"))

    @admin.display(description=gettext_lazy("audit trail"))
    def repair_trail(self, obj):
        return repairs.trail_html(self, obj)

    @admin.display(description=gettext_lazy("workflow"))
    def workflow_page(self, obj):
        return workflow_link(obj)

    # -- list ---------------------------------------------------------------------------------

    def get_changelist(self, request, **kwargs):
        return DeadLetterChangeList

    def search_by_id(self, number: int) -> Q:
        return Q(id=number) | Q(job_id=number)  # the dead letter's own id or its job's

    def search_by_text(self, queryset, term: str):
        return super().search_by_text(queryset, term) | queryset.filter(
            Q(error_type=term) | Q(unique_key=term)
        )

    @admin.display(description=gettext_lazy("id"))
    def dead_letter_id(self, obj):
        return f"#{obj.id}"

    @admin.display(description=gettext_lazy("reason"))
    def short_reason(self, obj):
        text = getattr(obj, "reason_start", None)
        return display.one_line(text if text is not None else obj.reason, 110)

    @admin.display(description=gettext_lazy("died"))
    def died(self, obj):
        return display.when(obj.failed_at)

    @admin.display(description=gettext_lazy("job id"))
    def original_job(self, obj):
        return f"#{obj.job_id}"

    # -- pages and actions ----------------------------------------------------------------------

    def extra_urls(self):
        return [
            self.route("summary/", self.summary, "summary"),
            self.route("<path:object_id>/edit/", self.edit, "edit"),
        ]

    def edit(self, request, object_id):
        return repairs.edit_view(self, request, object_id)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and self.has_operate_permission(request):
            context = {**context, "edit_url": self.page_url("edit", obj.pk)}
        return super().render_change_form(request, context, add, change, form_url, obj)

    def summary(self, request):
        """Dead letters of the last 7 days by error type, by job name, and by both."""
        require_view(self, request)
        groups = overview.dead_letter_groups(self.connection())
        by_type: dict[str, list[int]] = {}
        by_name: dict[str, list[int]] = {}
        for group in groups:
            for key, table in ((group.error_type, by_type), (group.name, by_name)):
                counts = table.setdefault(key, [0, 0, 0])
                counts[0] += group.last_hour
                counts[1] += group.last_day
                counts[2] += group.last_week

        def ranked(table):
            return sorted(table.items(), key=lambda item: (-item[1][2], item[0]))

        context = self.page_context(
            request,
            _("Dead letters by error and job"),
            groups=groups,
            by_type=ranked(by_type),
            by_name=ranked(by_name),
            changelist_url=reverse(self.url_name("changelist")),
            db_query=databases.url_query(separator="&"),
            total=self.rows()[: overview.COUNT_CAP + 1].count(),  # exact up to the cap
            count_cap=overview.COUNT_CAP,
        )
        return TemplateResponse(request, "admin/django_pgjobs/deadletter_summary.html", context)

    def act_on(self, request, object_id, spec: Action):
        """Requeue or delete one dead letter (the buttons of its page)."""
        done = spec.apply(self.connection(), [object_id], request)
        if not done:
            messages.warning(request, repairs.left_alone(object_id))
            return HttpResponseRedirect(self.page_url("changelist"))
        messages.success(request, confirm.rows_touched(self, spec.message(1), done, spec.links_to))
        if spec.name == "requeue":
            job_page = self.page_url("change", done[0], model_name="job")
            return HttpResponseRedirect(job_page)
        return HttpResponseRedirect(self.page_url("changelist"))

    def bulk(self, request, queryset, spec: Action):
        """``spec`` on the selected dead letters; first its confirmation page when it cannot be
        undone."""
        ids, truncated = self.bulk_ids(queryset)
        if ids and not confirm.confirmed(request, spec, "post"):
            return confirm.bulk_confirmation(self, request, spec, sorted(ids))
        done = spec.apply(self.connection(), ids, request) if ids else []
        skipped = len(ids) - len(done)
        why = repairs.letters_left_alone(skipped)
        # requeue: the new jobs' ids, linked; delete: the ids of the dead letters deleted
        touched = confirm.rows_touched(self, spec.message(len(done)), sorted(done), spec.links_to)
        self.report(request, touched, why, truncated)
        return None
