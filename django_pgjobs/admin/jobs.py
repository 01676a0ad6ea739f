"""Jobs: the backlog list (filters by view, queue and job name), the job page, the actions."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import registry
from ..models import view_condition
from ..states import Status, View, view_label
from . import confirm, display, repairs, values
from .actions import JOB_ACTIONS, JOB_ACTIONS_BY_FILTER, Action, bulk_actions
from .base import CappedChangeList, JobRowAdmin, QueueFilter
from .dashboard import dashboard_view
from .flow import waiting_on_key
from .workflows import workflow_link

LIST_FIELDS = (
    "id",
    "flow_key",
    "name",
    "queue",
    "priority",
    "status",
    "run_after",
    "attempts",
    "max_attempts",
    "created_at",
    "started_at",
    "lease_expires_at",
    "worker",
    "keep_result",
    "progress",
)
LEASE_EXPIRED = "lease_expired"


class ViewFilter(admin.SimpleListFilter):
    title = gettext_lazy("state")
    parameter_name = "view"

    def lookups(self, request, model_admin):
        return [
            (View.DUE, View.DUE.label),
            (View.SCHEDULED, View.SCHEDULED.label),
            (View.RETRYING, View.RETRYING.label),
            (View.RUNNING, View.RUNNING.label),
            (LEASE_EXPIRED, _("running, lease expired")),
            (View.SUCCESSFUL, _("successful (retained)")),
        ]

    def queryset(self, request, queryset):
        return jobs_in_view(queryset, self.value())


def jobs_in_view(queryset, view: str | None):
    """The jobs of ``queryset`` in ``view`` (a ``states.View`` or ``LEASE_EXPIRED``; any other
    value: all of them)."""
    if view == LEASE_EXPIRED:
        return queryset.lease_expired()
    if view in View.values:
        return queryset.in_view(view)
    return queryset


def view_ordering(view: str | None) -> list[str]:
    """Each view in the order an operator reads it, served by an index of its own."""
    if view in (View.DUE, View.SCHEDULED):
        return ["-priority", "run_after", "id"]  # claim order (pgjobs_job_claim_idx)
    if view == View.RETRYING:
        return ["run_after", "id"]  # next retry first (pgjobs_job_retrying_idx)
    if view in (View.RUNNING, LEASE_EXPIRED):
        return ["lease_expires_at", "id"]  # stuck first (pgjobs_job_lease_idx)
    if view == View.SUCCESSFUL:
        return ["-finished_at", "-id"]  # pgjobs_job_finished_idx
    return ["-id"]  # newest first (primary key)


class JobQueueFilter(QueueFilter):
    """The queue filter of the jobs list: ``Job.objects.in_queue`` (each half through an index)."""

    def queryset(self, request, queryset):
        value = self.value()
        if value is None or "\x00" in value:
            return super().queryset(request, queryset)
        return queryset.in_queue(value)


class JobNameFilter(admin.SimpleListFilter):
    """Job names from the registry (what workers can run), not a scan of the table."""

    title = gettext_lazy("job name")
    parameter_name = "name"

    def lookups(self, request, model_admin):
        names = set(registry.registered())
        if self.value():
            names.add(self.value())
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if "\x00" in value:  # PostgreSQL refuses NUL in text, so no row holds one
            return queryset.none()
        return queryset.filter(name=value)


class JobChangeList(CappedChangeList):
    def get_queryset(self, request, exclude_parameters=None):
        # Only the columns the list shows, plus the last error's type and the start of its
        # message: a job's error history (tracebacks included) can weigh tens of megabytes.
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.only(*LIST_FIELDS).annotate(
            last_error_start=values.LastError("errors", 300)
        )


class JobAdmin(JobRowAdmin):
    # The key columns first (attempts, last error), and only what the view needs, so the list
    # fits a laptop's screen with the navigation sidebar open (see ``get_list_display``).
    list_display = (
        "job_id",
        "job_name",
        "state",
        "attempts_of_max",
        "last_error",
        "due",
        "age",
        "queue_and_priority",
        "result_kept",
    )
    list_display_links = ("job_id",)
    list_filter = (ViewFilter, JobQueueFilter, JobNameFilter)
    search_fields = ("name",)  # replaced by get_search_results; the box needs one entry
    search_help_text = gettext_lazy(
        "An id (#123 or 123), a job name (full or its function name) or a unique key."
    )
    actions = bulk_actions(JOB_ACTIONS)
    row_actions = JOB_ACTIONS
    json_columns = ("args", "kwargs", "result", "metadata")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "name",
                    "queue",
                    "state",
                    "priority",
                    "unique_key",
                    "waiting_key",
                    "flow_key",
                    "workflow_page",
                )
            },
        ),
        (
            gettext_lazy("Timing"),
            {
                "fields": (
                    "created",
                    "runs_after",
                    "attempts_of_max",
                    "started",
                    "lease_expires",
                    "worker",
                    "finished",
                    "abort_requested",
                    "abort_requested_by",
                )
            },
        ),
        (gettext_lazy("Arguments"), {"fields": ("arguments", "keyword_arguments")}),
        (gettext_lazy("Progress"), {"fields": ("job_progress", "job_metadata")}),
        (gettext_lazy("Result"), {"fields": ("keep_result", "kept_result")}),
        (gettext_lazy("Repairs"), {"fields": ("repair_trail",)}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)

    @admin.display(description=gettext_lazy("audit trail"))
    def repair_trail(self, obj):
        return repairs.trail_html(self, obj)

    runs_after = display.time_field("run_after", gettext_lazy("run after"))
    started = display.time_field("started_at", gettext_lazy("started at"))
    lease_expires = display.time_field("lease_expires_at", gettext_lazy("lease expires at"))
    finished = display.time_field("finished_at", gettext_lazy("finished at"))
    abort_requested = display.time_field("abort_requested_at", gettext_lazy("abort requested at"))

    @admin.display(description=gettext_lazy("workflow"))
    def workflow_page(self, obj):
        return workflow_link(obj)

    # -- list ---------------------------------------------------------------------------------

    def get_changelist(self, request, **kwargs):
        return JobChangeList

    def get_ordering(self, request):
        return view_ordering(request.GET.get(ViewFilter.parameter_name))

    def search_by_text(self, queryset, term: str):
        # A unique key held by a ready or running job is found through its unique index; an OR
        # with the name tests would read the whole table instead.
        in_flight = Q(unique_key=term, status__in=[Status.READY, Status.RUNNING])
        if self.rows().filter(in_flight).exists():
            return queryset.filter(in_flight)
        if self.rows().filter(waiting_key=term).exists():  # pgjobs_job_waiting_key
            return queryset.filter(waiting_key=term)
        on_key = Q(flow_key=term, status__in=[Status.READY, Status.RUNNING])  # flow indexes
        if self.rows().filter(on_key).exists():
            return queryset.filter(on_key)
        return super().search_by_text(queryset, term) | queryset.filter(unique_key=term)

    def get_list_display(self, request):
        """Whether a result is kept matters for successful jobs only: that view alone shows it."""
        shown = super().get_list_display(request)
        if request.GET.get(ViewFilter.parameter_name) == View.SUCCESSFUL:
            return shown
        return tuple(name for name in shown if name != "result_kept")

    def get_actions(self, request, action_location=None):
        actions = super().get_actions(request, action_location)
        offered = JOB_ACTIONS_BY_FILTER.get(request.GET.get(ViewFilter.parameter_name), ())
        return {name: spec for name, spec in actions.items() if name in offered}

    @admin.display(description=gettext_lazy("id"))
    def job_id(self, obj):
        return f"#{obj.id}"

    @admin.display(description=gettext_lazy("state"))
    def state(self, obj):
        """The view's badge; for a running job, its worker and its lease under it, and its
        progress when it reported some."""
        if obj.status != Status.RUNNING:
            return format_html("{}{}", display.badge(obj.view), waiting_on_key(obj))
        expired = obj.lease_expires_at and obj.lease_expires_at < timezone.now()
        lease = _("lease expired {when}") if expired else _("lease until {when}")
        return format_html(
            '{}<div class="pgjobs-small">{}<br><span class="{}">{}</span></div>{}',
            display.badge(obj.view),
            obj.worker,
            "pgjobs-expired" if expired else "pgjobs-quiet",
            format_html(lease, when=display.when(obj.lease_expires_at)),
            display.progress(obj.progress) if obj.progress else "",
        )

    @admin.display(description=gettext_lazy("progress"))
    def job_progress(self, obj):
        return display.progress(obj.progress)

    @admin.display(description=gettext_lazy("metadata"))
    def job_metadata(self, obj):
        if json.loads(obj.metadata_preview)[0] is None:  # SQL NULL (the column is not loaded)
            return "–"
        return self.json_column(obj, "metadata")  # REDACT_KEYS, as for arguments

    @admin.display(description=gettext_lazy("queue"))
    def queue_and_priority(self, obj):
        """The queue, and the priority when it is not the default (0)."""
        if not obj.priority:
            return obj.queue
        return format_html(
            '{}<div class="pgjobs-small">{}</div>',
            obj.queue,
            _("priority %(priority)s") % {"priority": obj.priority},
        )

    @admin.display(description=gettext_lazy("due"))
    def due(self, obj):
        if obj.status != "ready":
            return "–"
        return display.when(obj.run_after)

    @admin.display(description=gettext_lazy("age"))
    def age(self, obj):
        return display.duration((timezone.now() - obj.created_at).total_seconds())

    @admin.display(description=gettext_lazy("last error"))
    def last_error(self, obj):
        # annotated by JobChangeList: nulls where the last entry is no object with these keys
        error_type, message = values.loads(obj.last_error_start) or (None, None)
        return display.error_summary(error_type, message, 100)

    @admin.display(description=gettext_lazy("result"), boolean=True)
    def result_kept(self, obj):
        """Whether the job keeps its return value (``keep_result``)."""
        return obj.keep_result

    @admin.display(description=gettext_lazy("return value"))
    def kept_result(self, obj):
        if not obj.keep_result:
            return _("not kept (the job was enqueued without keep_result)")
        if obj.status != Status.SUCCESSFUL:
            return _("kept when the job succeeds")
        return self.json_column(obj, "result")  # REDACT_KEYS, as for arguments

    # -- detail and actions -----------------------------------------------------------------------

    def actions_for(self, request, obj) -> list[Action]:
        return [action for action in self.row_actions.values() if obj.view in action.views]

    def extra_urls(self):
        return [self.route("dashboard/", self.dashboard, "dashboard")]

    def dashboard(self, request):
        return dashboard_view(self, request)

    def act_on(self, request, object_id, spec: Action):
        """Run one action on one job (the buttons of the job page)."""
        job = self.rows().only("status", "attempts", "run_after").filter(pk=object_id).first()
        if job is None:
            messages.warning(request, _("Job #%(id)s no longer exists.") % {"id": object_id})
            return HttpResponseRedirect(self.page_url("changelist"))
        page = self.page_url("change", job.pk)
        if job.view not in spec.views:
            messages.error(
                request,
                _("%(action)s is not possible: job #%(id)s is %(view)s.")
                % {"action": spec.label, "id": job.pk, "view": view_label(job.view)},
            )
            return HttpResponseRedirect(page)
        done = spec.apply(self.connection(), [job.pk], request)
        if not done:
            messages.warning(
                request, _("Job #%(id)s changed meanwhile; nothing was done.") % {"id": job.pk}
            )
            return HttpResponseRedirect(page)
        messages.success(request, confirm.rows_touched(self, spec.message(1), done, spec.links_to))
        if spec.name == "cancel":
            return HttpResponseRedirect(self.page_url("changelist"))
        return HttpResponseRedirect(page)

    def bulk(self, request, queryset, spec: Action):
        """``spec`` on the selected jobs it is valid for; first its confirmation page when it
        cannot be undone."""
        ids, truncated = self.bulk_ids(queryset)
        eligible = list(
            self.rows()
            .filter(id__in=ids)
            .filter(views_condition(spec.views))
            .order_by("id")
            .values_list("id", flat=True)
        )
        if eligible and not confirm.confirmed(request, spec, "post"):
            return confirm.bulk_confirmation(
                self, request, spec, eligible, len(ids) - len(eligible)
            )
        done = spec.apply(self.connection(), eligible, request) if eligible else []
        self.report(
            request,
            confirm.rows_touched(self, spec.message(len(done)), sorted(done), spec.links_to),
            spec.skipped(
                len(ids) - len(done),
                _("only %(views)s jobs qualify") % {"views": spec.valid_for},
            ),
            truncated,
        )
        return None


def views_condition(views) -> Q:
    now = timezone.now()
    query = Q(pk__in=[])
    for view in views:
        query |= view_condition(view, now)
    return query
