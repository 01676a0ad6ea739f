"""Workflows: the list, and a page per workflow with its steps, their states and timings,
reachable from any of its jobs (and dead letters); "Abort workflow" on it (POST, change
permission), as an action on the list too."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..models import DeadLetter, Job, Workflow
from ..states import view_label
from ..workflows import abort_workflow
from .base import OperatorAdmin, refuse_mutation, require_view, row_id
from .databases import on_this_database


def workflow_link(obj) -> str:
    """A link to the page of ``obj``'s workflow (a job or a dead letter), or "-"."""
    if not obj.workflow_id:
        return "-"
    url = on_this_database(reverse("admin:django_pgjobs_workflow_change", args=[obj.workflow_id]))
    if obj.workflow_step is None:
        text = _("workflow #%(id)s") % {"id": obj.workflow_id}
    else:
        text = _("workflow #%(id)s, step %(step)s") % {
            "id": obj.workflow_id,
            "step": obj.workflow_step + 1,
        }
    return format_html('<a href="{}">{}</a>', url, text)


class WorkflowAdmin(OperatorAdmin):
    list_display = ("id", "name", "state", "progress", "created_at", "finished_at")
    list_display_links = ("id", "name")
    list_filter = ("state",)
    actions = ("abort_selected",)

    @admin.display(description=gettext_lazy("step"))
    def progress(self, obj):
        sizes = _sizes(obj)
        if obj.step >= len(sizes):
            return _("%(steps)s of %(steps)s done") % {"steps": len(sizes)}
        done = sizes[obj.step] - obj.remaining
        return _("%(step)s of %(steps)s (%(done)s/%(size)s done)") % {
            "step": obj.step + 1,
            "steps": len(sizes),
            "done": done,
            "size": sizes[obj.step],
        }

    def has_operate_permission(self, request, obj=None) -> bool:
        """Aborting a workflow cancels its waiting jobs and asks its running ones to stop: what
        the jobs' own *Cancel* (``delete_job``) and *Abort* (``change_job``) need too, beside
        ``change_workflow``."""
        user = request.user
        return (
            self._has_model_perm(request, "change")
            and user.has_perm("django_pgjobs.change_job")
            and user.has_perm("django_pgjobs.delete_job")
        )

    def get_urls(self):
        return [self.route("<int:object_id>/abort/", self.abort_view, "abort"), *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        require_view(self, request)
        pk = row_id(object_id)
        if pk is None:
            raise Http404("no such workflow")
        workflow = get_object_or_404(self.rows(), pk=pk)
        jobs = list(
            self.rows(Job)
            .filter(workflow_id=workflow.pk)
            .order_by("workflow_step", "workflow_member")
            .only(*STEP_FIELDS)[:STEPS_SHOWN]
        )
        dead = list(
            self.rows(DeadLetter)
            .filter(workflow_id=workflow.pk)
            .order_by("workflow_step", "workflow_member")
            .only("id", "job_id", "name", "workflow_step", "workflow_member", "reason",
                  "started_at", "failed_at")[:STEPS_SHOWN]
        )  # fmt: skip
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": str(workflow),
            "workflow": workflow,
            "progress": self.progress(workflow),
            "steps": _steps(workflow, jobs, dead),
            "shown": STEPS_SHOWN,
            "can_abort": self.has_operate_permission(request) and _abortable(workflow, jobs),
            "abort_url": self.page_url("abort", workflow.pk),
        }
        return TemplateResponse(request, "admin/django_pgjobs/workflow.html", context)

    def abort_view(self, request, object_id):
        refused = refuse_mutation(self, request, "operate")
        if refused:
            return refused
        done = abort_workflow(object_id, using=self.database(), requested_by=_who(request))
        if done["aborted"]:
            cancelled = ngettext(
                "%(n)s job cancelled", "%(n)s jobs cancelled", done["cancelled"]
            ) % {"n": f"{done['cancelled']:,}"}
            asked = ngettext(
                "%(n)s running job asked to stop",
                "%(n)s running jobs asked to stop",
                len(done["requested"]),
            ) % {"n": f"{len(done['requested']):,}"}
            text = _("Aborted workflow #%(id)s: %(cancelled)s, %(asked)s.") % {
                "id": object_id,
                "cancelled": cancelled,
                "asked": asked,
            }
        else:
            text = _("Workflow #%(id)s had already finished.") % {"id": object_id}
        messages.success(request, text)
        return HttpResponseRedirect(self.page_url("change", object_id))

    @admin.action(description=gettext_lazy("Abort selected workflows"), permissions=["operate"])
    def abort_selected(self, request, queryset):
        ids = list(queryset.order_by("id").values_list("id", flat=True)[: ABORT_LIMIT + 1])
        aborted = sum(
            abort_workflow(i, using=self.database(), requested_by=_who(request))["aborted"]
            for i in ids[:ABORT_LIMIT]
        )
        messages.success(
            request,
            ngettext("Aborted %(n)s workflow.", "Aborted %(n)s workflows.", aborted)
            % {"n": f"{aborted:,}"},
        )
        if len(ids) > ABORT_LIMIT:
            messages.warning(
                request,
                _(
                    "Only the first %(limit)s selected workflows were aborted; run the action "
                    "again for the rest."
                )
                % {"limit": f"{ABORT_LIMIT:,}"},
            )


#: Workflows one "Abort selected workflows" aborts: each abort is a transaction of its own, and
#: a request that ran through "select all" of 50,000 would outlast any proxy's timeout.
ABORT_LIMIT = 100


#: Jobs listed on a workflow's page (a large group shows its first ones).
STEPS_SHOWN = 500
STEP_FIELDS = ("id", "name", "status", "attempts", "max_attempts", "workflow_step",
               "workflow_member", "created_at", "started_at", "finished_at", "run_after",
               "abort_requested_at")  # fmt: skip


def _abortable(workflow: Workflow, jobs: list[Job]) -> bool:
    """Running or failed; or aborted with jobs left to stop (a cancelled step's group runs on):
    as the statement ``abort_workflow`` decides."""
    if workflow.state in ("running", "failed"):
        return True
    return workflow.state == "aborted" and any(
        job.status == "ready" or (job.status == "running" and job.abort_requested_at is None)
        for job in jobs
    )


def _sizes(workflow: Workflow) -> list[int]:
    """The workflow's step sizes, or none when its row holds something else (a hand-made row:
    each page shows what it can rather than failing)."""
    sizes = workflow.sizes
    if not isinstance(sizes, list) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in sizes
    ):
        return []
    return sizes


def _who(request) -> str:
    return f"admin user {request.user.get_username()}"


def _steps(workflow: Workflow, jobs: list[Job], dead: list[DeadLetter]) -> list[dict]:
    """One entry per step: its jobs (live rows and dead letters) as table rows."""
    rows: dict[int, list[dict]] = {i: [] for i in range(len(workflow.sizes or []))}
    for job in jobs:
        ran = job.finished_at and job.started_at and (job.finished_at - job.started_at)
        rows.setdefault(job.workflow_step, []).append(
            {
                "url": on_this_database(reverse("admin:django_pgjobs_job_change", args=[job.pk])),
                "id": job.pk,
                "name": job.name,
                "state": view_label(job.status),
                "attempts": f"{job.attempts}/{job.max_attempts}",
                "started": job.started_at,
                "finished": job.finished_at,
                "took": f"{ran.total_seconds():.3f} s" if ran else "",
            }
        )
    for letter in dead:
        rows.setdefault(letter.workflow_step, []).append(
            {
                "url": on_this_database(
                    reverse("admin:django_pgjobs_deadletter_change", args=[letter.pk])
                ),
                "id": letter.job_id,
                "name": letter.name,
                "state": view_label("dead-lettered"),
                "attempts": "",
                "started": letter.started_at,
                "finished": letter.failed_at,
                "took": letter.reason,
            }
        )
    sizes = _sizes(workflow)
    return [
        {
            "number": index + 1,
            "size": sizes[index] if index < len(sizes) else len(members),
            "current": index == workflow.step,
            "jobs": members,
        }
        for index, members in sorted(rows.items())
    ]
