"""The repair bench of the dead letters: edit a dead letter's arguments, then requeue it; and the
audit trail (``repairs``) shown on dead letters and jobs."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from .. import redaction, repair
from .base import refuse_mutation, require_view, row_id


def edit_view(model_admin, request, object_id):
    """GET: the dead letter's arguments as JSON in a form. POST (``change_deadletter``, CSRF):
    check the edit as ``enqueue()`` would, then requeue it as a new job linked to the dead
    letter; a refused edit is shown again with the reason, nothing written."""
    require_view(model_admin, request)
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    pk = row_id(object_id)
    row = None if pk is None else model_admin.rows().filter(pk=pk).values().first()
    if row is None:
        raise Http404("no such dead letter")
    changelist = reverse(model_admin.url_name("changelist"))
    stored = [json.dumps(row["args"]), json.dumps(row["kwargs"])]
    if any(redaction.may_redact(text, row["name"]) for text in stored):
        messages.error(
            request,
            f"Dead letter #{pk} cannot be edited here: its arguments may hold values the admin "
            "redacts (PGJOBS['REDACT_KEYS']).",
        )
        return HttpResponseRedirect(reverse(model_admin.url_name("change"), args=[pk]))
    args_text = json.dumps(row["args"], indent=2, ensure_ascii=False)
    kwargs_text = json.dumps(row["kwargs"], indent=2, ensure_ascii=False)
    refused = ""
    if request.method == "POST":
        denied = refuse_mutation(model_admin, request, "operate")
        if denied:
            return denied
        args_text = request.POST.get("args", "")
        kwargs_text = request.POST.get("kwargs", "")
        try:
            args, kwargs = repair.parse_arguments(args_text, kwargs_text)
            by = f"admin user {request.user.get_username()!r}"
            job_id = repair.requeue_edited(
                model_admin.connection(), pk, row["name"], args, kwargs, by=by
            )
        except repair.EditRefused as error:
            refused = str(error)
        else:
            return _requeued(model_admin, request, pk, job_id, changelist)
    context = model_admin.page_context(
        request,
        f"Edit and requeue dead letter #{pk}",
        dead_letter=row,
        args_text=args_text,
        kwargs_text=kwargs_text,
        refused=refused,
        signature=repair.signature_of(row["name"]),
        back_url=reverse(model_admin.url_name("change"), args=[pk]),
        changelist_url=changelist,
    )
    return TemplateResponse(request, "admin/django_pgjobs/deadletter_edit.html", context)


def _requeued(model_admin, request, pk: int, job_id: int | None, changelist: str):
    if job_id is None:
        messages.warning(
            request,
            f"Dead letter #{pk} was left alone: it was already requeued or deleted by someone "
            "else, or its unique key is held by a ready or running job.",
        )
        return HttpResponseRedirect(changelist)
    job_page = reverse(model_admin.url_name("change", model_name="job"), args=[job_id])
    messages.success(
        request,
        format_html(
            'Requeued dead letter #{} with edited arguments as job <a href="{}">#{}</a>.',
            pk,
            job_page,
            job_id,
        ),
    )
    return HttpResponseRedirect(job_page)


def trail_html(model_admin, obj) -> str:
    """The audit trail of ``obj`` (a job or a dead letter): where it was replayed from, then
    one line per repair (when, who, what changed)."""
    lines = []
    if obj.replayed_from is not None:
        lines.append(format_html("<p>Requeued from dead letter #{}.</p>", obj.replayed_from))
    entries = obj.repairs if isinstance(obj.repairs, list) else []
    if entries:
        items = format_html_join(
            "",
            "<li>{} by {}: {} (dead letter #{} of job #{}); args {} → {}, kwargs {} → {}</li>",
            (
                (
                    entry.get("at", ""),
                    entry.get("by", ""),
                    entry.get("action", ""),
                    entry.get("dead_letter", ""),
                    entry.get("job_id", ""),
                    _short(entry.get("args_before")),
                    _short(entry.get("args")),
                    _short(entry.get("kwargs_before")),
                    _short(entry.get("kwargs")),
                )
                for entry in entries
                if isinstance(entry, dict)
            ),
        )
        lines.append(format_html('<ul class="pgjobs-repairs">{}</ul>', items))
    return format_html_join("", "{}", ((line,) for line in lines)) if lines else "-"


def _short(value, limit: int = 200) -> str:
    text = json.dumps(redaction.redact_value(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
