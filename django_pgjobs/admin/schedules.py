"""Recurring jobs in the admin: schedules added, edited, paused, resumed and run now.

Unlike the queue's rows, schedules are the operator's own data: they are edited with the usual
add and change forms (``add_schedule`` / ``change_schedule``). Pause, resume and run now are
actions (POST with CSRF, ``change_schedule``). A schedule declared in code (``@job(cron=...)``)
keeps its definition from the code: only pausing, resuming and running it now apply. A schedule
whose job is no longer registered is kept and marked (system check ``pgjobs.W002``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import transaction
from django.db.models.constants import LOOKUP_SEP
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import cron, redaction, registry, schedules
from ..conf import get_config
from ..models import DeadLetter, Job, Schedule, ScheduleFire
from ..payload import dump_arguments
from ..states import view_label
from . import display, values
from .base import CappedChangeList, CappedPaginator, row_id
from .databases import on_this_database

DEFINITION = ("job_name", "cron", "time_zone", "args", "kwargs", "catch_up")
#: The read-only fields showing a schedule's arguments, values of PGJOBS["REDACT_KEYS"] masked.
SHOWN = {"args": "shown_args", "kwargs": "shown_kwargs"}
#: Fires shown on a schedule's page.
RECENT_FIRES = 20


class ArgumentsField(forms.JSONField):
    """Django's JSON form field, with JSON nested deeper than Python reads (a few thousand
    levels) refused as invalid JSON, and shown back as typed, instead of a server error."""

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(
                self.error_messages["invalid"], code="invalid", params={"value": "…"}
            ) from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)


class ScheduleForm(forms.ModelForm):
    job_name = forms.ChoiceField(
        label=gettext_lazy("Job name"), help_text=gettext_lazy("A registered job.")
    )

    class Meta:
        model = Schedule
        fields = ("name", "paused", *DEFINITION)
        field_classes = {"args": ArgumentsField, "kwargs": ArgumentsField}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "job_name" not in self.fields:
            return
        names = sorted(registry.registered())
        current = self.instance.job_name
        choices = [(name, name) for name in names]
        if current and current not in names:
            choices.insert(0, (current, _("%(name)s (not registered)") % {"name": current}))
        self.fields["job_name"].choices = choices

    def clean_cron(self):
        value = self.cleaned_data["cron"]
        try:
            cron.fields_of(value)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return " ".join(value.split())

    def clean_time_zone(self):
        value = self.cleaned_data["time_zone"].strip()
        if value:
            try:
                cron.zone(value)
            except ValueError as error:
                raise forms.ValidationError(str(error)) from None
        return value

    def clean(self):
        data = super().clean()
        # shown read-only (declared in code, or holding values the admin masks): the row's own
        args = data.get("args") if "args" in self.fields else self.instance.args
        kwargs = data.get("kwargs") if "kwargs" in self.fields else self.instance.kwargs
        if "args" in data and not isinstance(args, list):
            self.add_error("args", _('A JSON array, e.g. [1, "a"].'))
        if "kwargs" in data and not isinstance(kwargs, dict):
            self.add_error("kwargs", _('A JSON object, e.g. {"days": 7}.'))
        name = data.get("job_name")
        if isinstance(args, list) and isinstance(kwargs, dict):
            try:  # what enqueue() would refuse, PostgreSQL too (NUL, Infinity): as the edit form
                dump_arguments(args, kwargs, get_config().MAX_PAYLOAD_BYTES)
            except (TypeError, ValueError) as error:
                self.add_error(None, str(error))
                return data
        if name in registry.registered() and isinstance(args, list) and isinstance(kwargs, dict):
            try:
                registry.get(name).check_arguments(args, kwargs)
            except TypeError as error:
                self.add_error(
                    None,
                    _("The arguments do not fit %(name)s: %(error)s")
                    % {"name": name, "error": error},
                )
        return data


class ScheduleAdmin(admin.ModelAdmin):
    """Schedules: what runs when, the next and last run, the last outcome."""

    form = ScheduleForm
    paginator = CappedPaginator
    show_full_result_count = False
    list_display = (
        "name",
        "job",
        "cron",
        "zone",
        "active",
        "next_run",
        "last_run",
        "last_outcome",
    )
    list_filter = ("paused", "source")
    search_fields = ("name", "job_name")
    actions = ("pause", "resume", "run_now")
    readonly_fields = ("source", "next_run", "last_run", "last_outcome", "recent_fires")

    def get_changelist(self, request, **kwargs):
        return CappedChangeList  # paged as the other lists; a NUL in a lookup lists nothing

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        """No filter from the query string reads inside args or kwargs (a 400): the rows
        ``?kwargs__token__startswith=a`` counts would tell a masked value a character at a
        time."""
        if lookup.split(LOOKUP_SEP, 1)[0] in SHOWN:
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_queryset(self, request):
        return super().get_queryset(request).using(get_config().DATABASE)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.source == "code":
            # the code owns them: changed there, synced at worker start; the name too (the row
            # is found by it: renamed, the next worker start would add a second, firing twice)
            fields += ["name", *DEFINITION]
        if obj is not None and self.arguments_shown(request, obj):
            fields += SHOWN.values()
        return fields

    def get_fields(self, request, obj=None):
        fields = ["name", "paused", *DEFINITION]
        if obj is not None:
            if self.arguments_shown(request, obj):
                fields = [SHOWN.get(name, name) for name in fields]
            fields += ["source", "next_run", "last_run", "last_outcome", "recent_fires"]
        return fields

    def arguments_shown(self, request, obj) -> bool:
        """Whether a schedule's page shows its arguments read-only, masked, rather than in the
        form: declared in code, seen without ``change_schedule``, or holding values the admin
        masks (a form would hand them out, and saving the mask would overwrite them)."""
        return (
            obj.source == "code"
            or not self.has_change_permission(request, obj)
            or _holds_secrets(obj)
        )

    def save_model(self, request, obj, form, change):
        changed = not change or any(name in form.changed_data for name in (*DEFINITION, "paused"))
        if changed:
            obj.changed_at = timezone.now()
            obj.next_fire_at = schedules.first_fire(obj.cron, obj.time_zone)
        obj.save(using=get_config().DATABASE)

    # -- columns --------------------------------------------------------------------------------

    @admin.display(description=gettext_lazy("job"), ordering="job_name")
    def job(self, obj):
        known = registry.registered()
        if obj.job_name not in known:
            why = _("{} (job not registered: fires nothing)")
            return _problem("pgjobs.W002", format_html(why, obj.job_name))
        name = display.short_name(obj.job_name)
        if obj.source == "code" and known[obj.job_name].cron is None:
            why = _("{} (no longer declares cron=: fires nothing)")
            return _problem("pgjobs.W003", format_html(why, name))
        problem = schedules.unfit(known[obj.job_name], obj.args, obj.kwargs)
        if problem is not None:  # a unique_key function's error may quote a masked value
            secrets = redaction.redact_job_call(obj.job_name, obj.args, obj.kwargs)[2]
            problem = redaction.hide(problem, secrets)
            why = _("{} (arguments do not fit: {}; fires nothing)")
            return _problem("pgjobs.W004", format_html(why, name, problem))
        return name

    @admin.display(description=gettext_lazy("args"))
    def shown_args(self, obj):
        return _arguments_html(obj, "args")

    @admin.display(description=gettext_lazy("kwargs"))
    def shown_kwargs(self, obj):
        return _arguments_html(obj, "kwargs")

    @admin.display(description=gettext_lazy("time zone"))
    def zone(self, obj):
        return schedules.time_zone_of(obj.time_zone)

    @admin.display(description=gettext_lazy("active"), boolean=True, ordering="paused")
    def active(self, obj):
        return not obj.paused

    @admin.display(description=gettext_lazy("next run"), ordering="next_fire_at")
    def next_run(self, obj):
        return _("paused") if obj.paused else display.when(obj.next_fire_at)

    @admin.display(description=gettext_lazy("last run"), ordering="last_fire_at")
    def last_run(self, obj):
        return display.when(obj.last_fire_at)

    @admin.display(description=gettext_lazy("last outcome"))
    def last_outcome(self, obj):
        if obj.last_job_id is None:
            return "-"
        return self._outcomes([obj.last_job_id])[obj.last_job_id]

    @admin.display(description=gettext_lazy("recent runs (the jobs it produced)"))
    def recent_fires(self, obj):
        fires = list(
            ScheduleFire.objects.using(get_config().DATABASE).filter(schedule=obj)[:RECENT_FIRES]
        )
        if not fires:
            return _("none yet")
        outcomes = self._outcomes([fire.job_id for fire in fires])
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li>{} {}: {}</li>",
                (
                    (
                        display.when(f.fire_time),
                        _("(run now)") if f.manual else "",
                        outcomes[f.job_id],
                    )
                    for f in fires
                ),
            ),
        )

    def _outcomes(self, job_ids: list[int]):
        """Per job id: a link to the job while it waits or runs, to its dead letter if it
        failed for good, else "finished" (a successful job is deleted unless kept)."""
        alias = get_config().DATABASE
        jobs = dict(Job.objects.using(alias).filter(id__in=job_ids).values_list("id", "status"))
        dead = dict(
            DeadLetter.objects.using(alias).filter(job_id__in=job_ids).values_list("job_id", "id")
        )
        outcomes = {}
        for job_id in job_ids:
            if job_id is None:
                outcomes[job_id] = _("skipped (a job with its unique key was ready or running)")
            elif job_id in jobs:
                url = on_this_database(
                    reverse("admin:django_pgjobs_job_change", args=[job_id]), alias
                )
                outcomes[job_id] = format_html(
                    '<a href="{}">{}</a>', url, _job_is(job_id, view_label(jobs[job_id]))
                )
            elif job_id in dead:
                url = on_this_database(
                    reverse("admin:django_pgjobs_deadletter_change", args=[dead[job_id]]), alias
                )
                outcomes[job_id] = format_html(
                    '<a href="{}">{}</a>', url, _job_is(job_id, view_label("dead-lettered"))
                )
            else:
                outcomes[job_id] = _job_is(job_id, _("finished"))
        return outcomes

    # -- actions --------------------------------------------------------------------------------

    @admin.action(description=gettext_lazy("Pause selected schedules"), permissions=["change"])
    def pause(self, request, queryset):
        found = set(queryset.values_list("pk", flat=True))
        count = queryset.filter(paused=False).update(paused=True, changed_at=timezone.now())
        done = ngettext("Paused %(n)s schedule.", "Paused %(n)s schedules.", count)
        messages.success(request, done % {"n": f"{count:,}"})
        _say_gone(request, found)

    @admin.action(description=gettext_lazy("Resume selected schedules"), permissions=["change"])
    def resume(self, request, queryset):
        found = set(queryset.values_list("pk", flat=True))
        count = 0
        with transaction.atomic(using=get_config().DATABASE):
            for row in queryset.select_for_update().filter(paused=True):
                row.paused, row.changed_at = False, timezone.now()
                row.next_fire_at = schedules.first_fire(row.cron, row.time_zone)  # none missed
                row.save(update_fields=["paused", "changed_at", "next_fire_at"])
                count += 1
        done = ngettext("Resumed %(n)s schedule.", "Resumed %(n)s schedules.", count)
        messages.success(request, done % {"n": f"{count:,}"})
        _say_gone(request, found)

    @admin.action(description=gettext_lazy("Run selected schedules now"), permissions=["change"])
    def run_now(self, request, queryset):
        connection = schedules.jobs_connection()
        rows = list(queryset)
        _say_gone(request, {row.pk for row in rows})
        for row in rows:
            try:
                definition = registry.get(row.job_name)
            except registry.UnknownJobError:
                messages.error(
                    request,
                    _("%(schedule)s: job %(job)s is not registered.")
                    % {"schedule": row.name, "job": row.job_name},
                )
                continue
            if (problem := schedules.elsewhere(definition)) is not None:
                messages.error(request, f"{row.name}: not run, {problem}.")
                continue
            job_id = schedules.run_now(connection, row, definition)
            if job_id is None:
                messages.warning(request, _not_fired(row))
                continue
            if job_id == schedules.SKIPPED:
                messages.warning(
                    request,
                    _("%(schedule)s: not run, a job with its unique key is ready or running.")
                    % {"schedule": row.name},
                )
                continue
            messages.success(
                request,
                _("Ran %(schedule)s now: job #%(id)s.") % {"schedule": row.name, "id": job_id},
            )


def _gone_ids(request, found: set[int]) -> set[int]:
    """The ids a list action's POST selected that are not in ``found`` (what it acted on) and
    no longer exist: deleted since the list was shown, by another admin or a script."""
    selected = {row_id(text) for text in request.POST.getlist(ACTION_CHECKBOX_NAME)}
    missing = selected - found - {None}
    if not missing:
        return set()
    rows = Schedule.objects.using(get_config().DATABASE)
    return missing - set(rows.filter(pk__in=missing).values_list("pk", flat=True))


def _say_gone(request, found: set[int]) -> None:
    gone = len(_gone_ids(request, found))
    if gone:
        text = ngettext(
            "%(n)s selected schedule no longer exists (deleted since the list was shown): "
            "nothing was done for it.",
            "%(n)s selected schedules no longer exist (deleted since the list was shown): "
            "nothing was done for them.",
            gone,
        )
        messages.warning(request, text % {"n": f"{gone:,}"})


def _not_fired(row: Schedule) -> str:
    """Why run now fired nothing for ``row``, read before: its row is gone, or another run now
    of it took the same microsecond (a fire time runs once)."""
    if not Schedule.objects.using(get_config().DATABASE).filter(pk=row.pk).exists():
        return _("%(schedule)s: not run, it no longer exists (deleted meanwhile).") % {
            "schedule": row.name
        }
    return _("%(schedule)s: not run, another run now of it took the same moment.") % {
        "schedule": row.name
    }


def _masked(obj: Schedule) -> tuple:
    """A schedule's ``(args, kwargs)`` as the job pages show a job's: the values of
    ``PGJOBS["REDACT_KEYS"]`` keys, and of parameters of such names, as ``********``."""
    return redaction.redact_job_call(obj.job_name, obj.args, obj.kwargs)[:2]


def _holds_secrets(obj: Schedule) -> bool:
    return _masked(obj) != (obj.args, obj.kwargs)


def _arguments_html(obj: Schedule, column: str) -> str:
    """A schedule's args or kwargs as its page shows them read-only: masked, pretty-printed;
    with why they are not in the form when masking is the reason."""
    shown = _masked(obj)
    value = shown[0] if column == "args" else shown[1]
    text = values.pretty(value) or values.compact(value, limit=values.PREVIEW_CHARS)
    note = ""
    if obj.source == "admin" and shown != (obj.args, obj.kwargs):
        note = format_html(
            '<div class="help">{}</div>',
            _(
                "Not editable here: the arguments hold values the admin masks "
                "(PGJOBS['REDACT_KEYS']). To change them, add a schedule with the new "
                "arguments and delete this one."
            ),
        )
    return format_html('<pre class="pgjobs-pre">{}</pre>{}', text, note)


def _problem(check: str, text: str) -> str:
    """A schedule's job cell when it fires nothing, titled with its system check's id."""
    return format_html('<span class="errornote" title="{}">{}</span>', check, text)


def _job_is(job_id: int, state) -> str:
    return _("job #%(id)s: %(state)s") % {"id": job_id, "state": state}
