"""Turning rows into what an operator reads: ages, times, error entries and summaries.

Everything returned here is plain text (or built with ``format_html``), so templates escape it:
a job argument or an error message can never inject markup into the admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _

from ..conf import get_config
from ..states import View, view_label
from . import values
from .values import compact, loads


def duration(seconds: float | None) -> str:
    """``1 h 5 min``, ``42 s``, ``350 ms``: short and rounded."""
    if seconds is None:
        return "–"
    if seconds == float("inf"):
        return "> 1 h"
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if minutes < 10 and secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return _("%(days)s d %(hours)s h") % {"days": hours // 24, "hours": hours % 24}


def aware(moment: datetime) -> datetime:
    """``moment`` as an aware datetime: a naive one (rows read with ``USE_TZ = False``) is in
    the project's time zone. Stored error times are always aware, so pages mix both."""
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def local(moment: datetime) -> datetime:
    """``moment`` in the current time zone, whatever ``USE_TZ`` says; as it is when that zone
    cannot hold it (a hand-made ``9999-12-31 23:00 UTC`` is past ``datetime.max`` in UTC+2)."""
    try:
        return timezone.localtime(aware(moment))
    except OverflowError:
        return aware(moment)


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """``in 5 min`` / ``3 min ago``."""
    if moment is None:
        return "–"
    delta = (aware(moment) - aware(now or timezone.now())).total_seconds()
    if abs(delta) < 1:
        return _("now")
    if delta > 0:
        return _("in %(duration)s") % {"duration": duration(delta)}
    return _("%(duration)s ago") % {"duration": duration(delta)}


def when(moment: datetime | str | None, now: datetime | None = None) -> str:
    """A time as every pgjobs page shows one: how long ago or ahead ("3 min ago"), the exact time
    in the current time zone on hover ("2026-11-24 05:15:54 CET"). ``moment`` may be the text of
    an error's time (ISO 8601); text that is no such time is shown as it is."""
    if moment is None or moment == "":
        return "–"
    if isinstance(moment, str):
        parsed = _parse(moment)
        if parsed is None:
            return moment
        moment = parsed
    shown = local(moment)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        shown.isoformat(),
        shown.strftime("%Y-%m-%d %H:%M:%S %Z"),
        relative(moment, now),
    )


def time_field(field: str, description: str):
    """A ModelAdmin display of the datetime column ``field`` as ``when`` shows it: list it in
    ``fields`` / ``readonly_fields`` under its own name (``created`` for ``created_at``...) so
    that detail pages show their times as the lists do, not in Django's long date format."""

    @admin.display(description=description)
    def show(model_admin, obj):
        return when(getattr(obj, field))

    show.__name__ = show.__qualname__ = field
    return show


def one_line(text: str | None, limit: int = 120) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_name(name: str, keep: int = 2) -> str:
    """A job name cut to its last ``keep`` dotted parts (``jobs.send_welcome_email``), with the
    full name as a tooltip."""
    parts = name.split(".")
    if len(parts) <= keep:
        return name
    return format_html('<span title="{}">{}</span>', name, ".".join(parts[-keep:]))


def error_summary(error_type: str | None, message: str | None, limit: int = 120) -> str:
    if not error_type and not message:
        return ""
    return one_line(f"{error_type or _('Error')}: {message or ''}", limit)


VIEW_COLOURS = {
    View.DUE: "#417690",
    View.SCHEDULED: "#79aec8",
    View.RETRYING: "#c4882f",
    View.RUNNING: "#3a8a3a",
    View.SUCCESSFUL: "#777",
    "dead": "#ba2121",
}


def badge(view: str) -> str:
    return format_html(
        '<span class="pgjobs-badge" style="background:{}">{}</span>',
        VIEW_COLOURS.get(view, "#777"),
        view_label(view),
    )


@dataclass(frozen=True)
class ErrorHistory:
    """What a job's or dead letter's page shows of its ``errors``: the newest entries, as text
    (oldest first), and how many the row holds in all."""

    entries: list[dict[str, str]]
    total: int
    job_id: int  # the id ``get_result`` finds the row by
    database: str  # the alias the row was read from; "" for ``PGJOBS["DATABASE"]``

    @property
    def newest_first(self) -> list[dict[str, str]]:
        return self.entries[::-1]

    @property
    def left_out(self) -> int:
        return max(self.total - len(self.entries), 0)

    @property
    def left_out_text(self) -> str:
        return f"{self.left_out:,}"

    @property
    def total_text(self) -> str:
        return f"{self.total:,}"

    @property
    def all_errors_call(self) -> str:
        """The call that returns every error of the row, for a shell."""
        using = f", using={self.database!r}" if self.database else ""
        return f"get_result({self.job_id}{using}).errors"


def error_history(row: Any, *, dead_letter: bool = False) -> ErrorHistory:
    """The errors of ``row``, read by ``values.NewestErrors`` (its ``newest_errors``)."""
    value = loads(row.newest_errors)
    total, items = value if isinstance(value, list) and len(value) == 2 else (0, [])
    database = row._state.db or ""
    return ErrorHistory(
        entries=[_error_entry(item) for item in items if isinstance(item, dict)],
        total=total if isinstance(total, int) else 0,
        job_id=row.job_id if dead_letter else row.pk,
        database="" if database == get_config().DATABASE else database,
    )


def _error_entry(item: dict[str, Any]) -> dict[str, str]:
    """One entry of ``NewestErrors`` as text: fields cut in SQL one character past their limit
    end in "…"; a traceback cut in the middle says how much is left out."""
    entry = {
        key: compact(item.get(key) or "", values.FIELD_CHARS)
        for key in ("at", "attempt", "type", "worker")
    }
    entry["message"] = compact(item.get("message") or "", values.MESSAGE_CHARS)
    traceback, cut = item.get("traceback") or "", item.get("traceback_cut") or 0
    if cut:
        gap = _("[... %(count)s characters not shown here ...]") % {"count": f"{cut:,}"}
        traceback = f"{traceback}\n{gap}\n{item.get('traceback_end') or ''}"
    entry["traceback"] = traceback
    return entry


def queue_list(stored_text: str | None) -> str:
    """A worker's ``queues`` column (PostgreSQL's text of it) for a table cell: the names, or
    "all" for an empty list; anything but a list of names is shown as its JSON."""
    value = loads(stored_text)
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return ", ".join(value) or _("all")
    return compact(stored_text or "null")


def timeline(
    row: Any, errors: list[dict[str, str]], *, dead_letter: bool = False
) -> list[dict[str, Any]]:
    """What happened to a job, oldest first: enqueued, each failed attempt shown (``errors``,
    the entries of ``error_history``), claims, the end."""
    events: list[dict[str, Any]] = [{"at": row.created_at, "what": _("enqueued"), "detail": ""}]
    for error in errors:
        events.append(
            {
                "at": _parse(error["at"]),
                "what": _("attempt %(attempt)s failed") % {"attempt": error["attempt"] or "?"},
                "detail": error_summary(error["type"], error["message"]),
            }
        )
    if dead_letter:
        events.append({"at": row.failed_at, "what": _("dead-lettered"), "detail": row.reason})
        return _sorted(events)
    if row.status == "running" and row.started_at:
        events.append(
            {
                "at": row.started_at,
                "what": _("attempt %(attempt)s started") % {"attempt": row.attempts},
                "detail": _("worker %(worker)s, lease until %(when)s")
                % {"worker": row.worker, "when": relative(row.lease_expires_at)},
            }
        )
    elif row.status == "successful":
        if row.started_at:
            started = _("attempt %(attempt)s started") % {"attempt": row.attempts}
            events.append({"at": row.started_at, "what": started})
        events.append({"at": row.finished_at, "what": _("succeeded"), "detail": ""})
    else:
        label = _("retry due") if row.attempts else _("due")
        events.append({"at": row.run_after, "what": label, "detail": ""})
    return _sorted(events)


def _sorted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # in one zone: rows read naive with USE_TZ = False, stored error times are aware
    for event in events:
        if event["at"]:
            event["at"] = local(event["at"])
    floor = datetime.min.replace(tzinfo=dt_timezone.utc)
    return sorted(events, key=lambda e: e["at"] or floor)


def _parse(value: str) -> datetime | None:
    """An error's time, or None when it is no time this page can show (a hand-made row:
    ``0001-01-01T00:00+14:00`` is before ``datetime.min`` in any other zone)."""
    try:
        return timezone.localtime(aware(datetime.fromisoformat(value)))
    except (ValueError, OverflowError):
        return None


def progress(report: Any) -> str:
    """A running job's last progress report (``progress.py``): a bar and "3 of 10 (30%) · note ·
    when"; "–" when it reported none. The row's JSON is shown defensively: any column value."""
    if not isinstance(report, dict) or not _number(report.get("done")):
        return "–"
    done, total = report["done"], report.get("total")
    note = report.get("note") if isinstance(report.get("note"), str) else ""
    if _number(total) and total > 0:
        share = min(max(done / total, 0.0), 1.0)
        amount = _("%(done)s of %(total)s (%(share)s)") % {
            "done": f"{done:g}",
            "total": f"{total:g}",
            "share": f"{share:.0%}",
        }
        bar = format_html('<progress max="1" value="{}"></progress> ', f"{share:.3f}")
    else:
        amount, bar = _("%(done)s done") % {"done": f"{done:g}"}, ""
    return format_html(
        '<span class="pgjobs-progress">{}{}</span><div class="pgjobs-small">{}{}</div>',
        bar,
        amount,
        f"{note[:200]} · " if note else "",
        when(report.get("at")),
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
