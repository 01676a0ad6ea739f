"""Cron expressions and the fire times of a schedule: what is due, what was missed.

Parsing and stepping are cronsim's (the cron evaluator of Healthchecks.io): no dependencies, and
Debian cron's rules across daylight-saving changes, which docs/howto/recurring.md spells out:

- a job at a fixed time (``30 2 * * *``) whose time falls in a gap (clocks jump forward) runs at
  the first minute after the gap; whose time happens twice (clocks go back) runs once, the first
  time;
- a job every N minutes or hours (``*/15 * * * *``, ``0 * * * *``) follows real time: nothing in
  the gap (those minutes do not exist), both passes of a repeated hour.

Fire times are instants (aware, UTC): a schedule and one instant make a fire, unique in
``pgjobs_schedule_fire``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import zoneinfo
from typing import Any

from cronsim import CronSim, CronSimError

from .payload import ArgumentsNotJSON, dump_arguments

#: The ``@``-aliases of cron, as five fields.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def fields_of(expression: str) -> str:
    """The five fields of ``expression`` (an alias expanded); ``ValueError`` when it is not a
    five-field cron expression or an alias."""
    if not isinstance(expression, str):
        raise ValueError(f"cron must be a string, not {type(expression).__name__}")
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in ALIASES:
            raise ValueError(f"unknown cron alias {text!r} (known: {', '.join(ALIASES)})")
        return ALIASES[text.lower()]
    if len(text.split()) != 5:
        raise ValueError(
            f"cron {expression!r} must have five fields (minute hour day month weekday) or be "
            f"one of {', '.join(ALIASES)}"
        )
    try:
        next(CronSim(text, dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)))
    except CronSimError as error:
        raise ValueError(f"cron {expression!r}: {error}") from None
    except StopIteration:  # "0 0 */29 2 1#5": a fifth Monday of February on the 1st or 30th
        raise ValueError(f"cron {expression!r} never fires: no date matches it") from None
    return text


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The time zone ``name`` (IANA, e.g. ``Europe/Paris``); ``ValueError`` for an unknown one."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(f"unknown time zone {name!r}") from None


#: How far before a daylight-saving change cronsim starts stepping: begun inside a repeated
#: hour, its steps miss the second pass; begun before it, they see both.
_BEFORE_CHANGE = dt.timedelta(hours=3)


def _times_from(fields: str, tz: zoneinfo.ZoneInfo, start: dt.datetime):
    """The fire times (UTC) after ``start``, in order."""
    begin = start
    if tz.utcoffset(start - _BEFORE_CHANGE) != tz.utcoffset(start + _BEFORE_CHANGE):
        begin = start - _BEFORE_CHANGE  # a change is near: step from before it
    for local in CronSim(fields, begin.astimezone(tz)):
        moment = local.astimezone(dt.timezone.utc)
        if moment > start:
            yield moment


def next_after(expression: str, time_zone: str, after: dt.datetime) -> dt.datetime:
    """The first fire time strictly after ``after``, in UTC."""
    return next(_times_from(fields_of(expression), zone(time_zone), after))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one look at a schedule decides: the fire times to enqueue now (oldest first), how
    many missed ones were left out, and the next fire time after ``now``."""

    fire: list[dt.datetime]
    skipped: int
    next_fire: dt.datetime


def plan(
    expression: str,
    time_zone: str,
    due_since: dt.datetime,
    now: dt.datetime,
    catch_up: int,
    grace_seconds: float,
) -> Plan:
    """The fire times from ``due_since`` to ``now`` (both included). A fire time at most
    ``grace_seconds`` old is on time and fires; older ones were missed (no worker ran then):
    the ``catch_up`` most recent of them fire (0: none, the misfire policy "skip"). Looks back
    one day from ``now`` first, further only while it finds fewer than ``catch_up`` missed
    ones, so a schedule missed for a year costs a day of steps to plan (and up to 10,000 to
    count what it skipped, which the log says)."""
    fields, tz = fields_of(expression), zone(time_zone)
    window = dt.timedelta(days=1)
    while True:
        start = max(due_since - dt.timedelta(microseconds=1), now - window)
        times = []
        for moment in _times_from(fields, tz, start):
            if moment > now:
                break
            times.append(moment)
        on_time = [t for t in times if (now - t).total_seconds() <= grace_seconds]
        missed = times[: len(times) - len(on_time)]
        if len(missed) >= catch_up or start < due_since:
            break
        window *= 4
    kept = missed[max(0, len(missed) - catch_up) :] if catch_up else []
    fire = kept + on_time
    return Plan(
        fire=fire,
        skipped=_count_before(fields, tz, due_since, fire[0] if fire else now),
        next_fire=next_after(expression, time_zone, now),
    )


COUNT_LIMIT = 10_000  # missed fire times counted at most (``Plan.skipped``): "at least" past it


def _count_before(
    fields: str,
    tz: zoneinfo.ZoneInfo,
    since: dt.datetime,
    end: dt.datetime,
    limit: int = COUNT_LIMIT,
) -> int:
    """Fire times from ``since`` up to (not including) ``end`` (or ``now``), at most ``limit``:
    the missed times left out, for the log."""
    skipped = 0
    for moment in _times_from(fields, tz, since - dt.timedelta(microseconds=1)):
        if moment >= end or skipped >= limit:
            break
        skipped += 1
    return skipped


@dataclasses.dataclass(frozen=True)
class Cron:
    """A schedule declared in code: ``@job(cron="*/5 * * * *")`` or, with arguments, a time zone
    or a misfire policy, ``@job(cron=Cron("0 3 * * *", args=(7,), time_zone="Europe/Paris",
    catch_up=0))``.

    ``time_zone``: an IANA name; None: the project's ``TIME_ZONE``. ``catch_up``: how many of the
    most recent fire times missed while no worker ran are enqueued when one starts (0: skip them;
    default 1: run once for the most recent)."""

    expression: str
    args: tuple[Any, ...] | list[Any] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    time_zone: str | None = None
    catch_up: int = 1

    def __post_init__(self) -> None:
        fields_of(self.expression)
        if self.time_zone is not None:
            zone(self.time_zone)
        if not isinstance(self.args, (tuple, list)) or not isinstance(self.kwargs, dict):
            raise ValueError("Cron args must be a tuple or list and kwargs a dict")
        try:  # refused here, at import, not by every worker at its start (sync_declared)
            dump_arguments(self.args, self.kwargs, sys.maxsize)
        except ArgumentsNotJSON as error:
            raise ArgumentsNotJSON(f"Cron({self.expression!r}): {error}") from None
        if isinstance(self.catch_up, bool) or not isinstance(self.catch_up, int):
            raise ValueError(f"catch_up must be an int, not {self.catch_up!r}")
        if not 0 <= self.catch_up <= 1000:
            raise ValueError(f"catch_up must be between 0 and 1000, not {self.catch_up}")
        object.__setattr__(self, "args", tuple(self.args))

    @classmethod
    def of(cls, value: str | Cron) -> Cron:
        """``@job(cron=...)``'s value as a ``Cron``."""
        return value if isinstance(value, Cron) else cls(value)
