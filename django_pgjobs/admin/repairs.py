"""The repair bench of the dead letters: edit a dead letter's arguments, then requeue it; and the
audit trail (``repairs``) shown on dead letters and jobs."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import operations, redaction, repair
from . import display
from .base import refuse_mutation, require_view, row_id

#: Why selected dead letters were not requeued.
GONE = gettext_lazy(
    "already requeued or deleted by someone else, or their unique key is held by a ready or "
    "running job, or by a newer selected dead letter requeued instead"
)


def letters_left_alone(count: int) -> str:
    """What a requeue of ``count`` selected dead letters left alone says ("" for none)."""
    if not count:
        return ""
    return ngettext(
        "%(n)s selected dead letter was left alone (%(why)s).",
        "%(n)s selected dead letters were left alone (%(why)s).",
        count,
    ) % {"n": f"{count:,}", "why": GONE}


def left_alone(pk) -> str:
    """The message of a requeue of one dead letter that did nothing."""
    return _(
        "Dead letter #%(id)s was left alone: it was already requeued or deleted by someone "
        "else, or its unique key is held by a ready or running job."
    ) % {"id": pk}


#: What the edit page reads of a dead letter: not its error history, which can weigh megabytes.
EDIT_FIELDS = ("id", "job_id", "name", "queue", "error_type", "reason", "args", "kwargs")


def edit_view(model_admin, request, object_id):
    """GET: the dead letter's arguments as JSON in a form. POST (``change_deadletter``, CSRF):
    check the edit as ``enqueue()`` would, then requeue it as a new job linked to the dead
    letter; a refused edit is shown again with the reason, nothing written."""
    require_view(model_admin, request)
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    pk = row_id(object_id)
    row = None if pk is None else model_admin.rows().filter(pk=pk).values(*EDIT_FIELDS).first()
    if row is None:
        raise Http404("no such dead letter")
    changelist = model_admin.page_url("changelist")
    stored = [json.dumps(row["args"]), json.dumps(row["kwargs"])]
    if any(redaction.may_redact(text, row["name"]) for text in stored):
        messages.error(
            request,
            _(
                "Dead letter #%(id)s cannot be edited here: its arguments may hold values the "
                "admin redacts (PGJOBS['REDACT_KEYS'])."
            )
            % {"id": pk},
        )
        return HttpResponseRedirect(model_admin.page_url("change", pk))
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
        _("Edit and requeue dead letter #%(id)s") % {"id": pk},
        dead_letter=row,
        args_text=args_text,
        kwargs_text=kwargs_text,
        refused=refused,
        signature=repair.signature_of(row["name"]),
        back_url=model_admin.page_url("change", pk),
        changelist_url=changelist,
    )
    return TemplateResponse(request, "admin/django_pgjobs/deadletter_edit.html", context)


def _requeued(model_admin, request, pk: int, job_id: int | None, changelist: str):
    if job_id is None:
        messages.warning(request, left_alone(pk))
        return HttpResponseRedirect(changelist)
    job_page = model_admin.page_url("change", job_id, model_name="job")
    messages.success(
        request,
        format_html(
            _('Requeued dead letter #{} with edited arguments as job <a href="{}">#{}</a>.'),
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
        lines.append(
            format_html(
                "<p>{}</p>", _("Requeued from dead letter #%(id)s.") % {"id": obj.replayed_from}
            )
        )
    entries = obj.repairs if isinstance(obj.repairs, list) else []
    if entries:
        items = format_html_join(
            "",
            "<li>{}</li>",
            ((_entry(entry, obj.name),) for entry in entries if isinstance(entry, dict)),
        )
        lines.append(format_html('<ul class="pgjobs-repairs">{}</ul>', items))
    return format_html_join("", "{}", ((line,) for line in lines)) if lines else "-"


def _entry(entry: dict, name: str) -> str:
    """One repair: when, who, what (and the arguments before and after, for an edit, masked as
    the job ``name``'s arguments are: ``masked_call``)."""
    text = format_html(
        _("{} by {}: {} (dead letter #{} of job #{})"),
        entry.get("at", ""),
        entry.get("by", ""),
        entry.get("action", ""),
        entry.get("dead_letter", ""),
        entry.get("job_id", ""),
    )
    if "args" not in entry:
        return text
    args_before, kwargs_before = masked_call(
        name, entry.get("args_before"), entry.get("kwargs_before")
    )
    args, kwargs = masked_call(name, entry.get("args"), entry.get("kwargs"))
    return format_html(
        _("{}; args {} → {}, kwargs {} → {}"),
        text,
        _short(args_before),
        _short(args),
        _short(kwargs_before),
        _short(kwargs),
    )


def masked_call(name: str, args, kwargs) -> tuple:
    """``args`` and ``kwargs`` of the job ``name`` with the values of ``REDACT_KEYS`` masked as
    its page masks its arguments: by key, and positional ones by their parameter's name (a
    secret passed by position has no key to be found by)."""
    return redaction.redact_job_call(name, args, kwargs)[:2]


def _short(value, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def replay_over_time(model_admin, request, queryset):
    """The changelist action "Replay over time": first a page asking the rate (jobs per second),
    then the selected dead letters requeued in one statement, due ``1 / rate`` seconds apart
    (oldest first, the first now); the message says how many and when the last runs."""
    ids, truncated = model_admin.bulk_ids(queryset)
    rate, problem = _rate(request.POST.get("rate"))
    if rate is None:
        context = model_admin.page_context(
            request,
            ngettext(
                "Replay %(n)s dead letter over time",
                "Replay %(n)s dead letters over time",
                len(ids),
            )
            % {"n": f"{len(ids):,}"},
            # "select all" of a filtered list: the same filter (the page's query string) again,
            # not thousands of ids in a form (DATA_UPLOAD_MAX_NUMBER_FIELDS)
            select_across=request.POST.get("select_across") == "1",
            ids=sorted(ids),
            count=len(ids),
            problem=problem,
            rate_text=request.POST.get("rate", ""),
            changelist_url=model_admin.page_url("changelist"),
        )
        return TemplateResponse(request, "admin/django_pgjobs/deadletter_replay.html", context)
    scheduled = operations.requeue_dead_letters_spread(
        model_admin.connection(),
        ids,
        1 / rate.per_second,
        requested_by=f"admin user {request.user.get_username()!r}",
    )
    skipped = len(ids) - len(scheduled)
    if not scheduled:
        messages.warning(request, NONE_REPLAYED)
        return None
    done = replay_message(len(scheduled), rate, max(run_after for _, run_after in scheduled))
    left = letters_left_alone(skipped)
    model_admin.report(request, done, left, truncated)
    return None


NONE_REPLAYED = gettext_lazy("No dead letter was requeued: all were gone or held.")


def replay_message(count: int, rate: repair.Rate, last: datetime) -> str:
    """What a staggered replay did (the admin's and ``pgjobs requeue --rate``'s words)."""
    seconds = (count - 1) / rate.per_second
    return ngettext(
        "Scheduled %(n)s job at %(rate)s: the first is due now, the last at %(last)s "
        "(in %(duration)s).",
        "Scheduled %(n)s jobs at %(rate)s: the first is due now, the last at %(last)s "
        "(in %(duration)s).",
        count,
    ) % {
        "n": f"{count:,}",
        "rate": rate.text,
        "last": f"{display.local(last):%Y-%m-%d %H:%M:%S}",
        "duration": display.duration(seconds),
    }


def _rate(text: str | None) -> tuple[repair.Rate | None, str]:
    if text is None:
        return None, ""
    try:
        return repair.parse_rate(text), ""
    except ValueError as error:
        return None, f"{str(error)[:1].upper()}{str(error)[1:]}."
