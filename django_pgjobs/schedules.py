"""Recurring jobs: the schedule rows (``models.Schedule``) and the statements that fire them.

Each fire time enqueues its job once whichever workers try: ``fire_schedule`` inserts the fire
row (unique per schedule and fire time) and the job in one statement (invariant 17). Any worker
may fire; none leads. The worker's ``Scheduler`` unit (``worker/scheduler.py``) calls
``due()``, ``cron.plan()`` and ``fire()``; the admin's "run now" calls ``run_now()``; a worker
starting calls ``sync_declared()`` for the schedules declared with ``@job(cron=...)``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable
from typing import Any, NamedTuple, TypeAlias

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from . import cron, db, registry
from .conf import get_config
from .flow import flow_params
from .sql import query
from .validation import unique_key_of_call

logger = logging.getLogger("django_pgjobs.worker")

Connection: TypeAlias = BaseDatabaseWrapper


def time_zone_of(name: str) -> str:
    """A schedule's time zone: its own, or the project's ``TIME_ZONE`` when empty."""
    return name or timezone.get_default_timezone_name()


def instant(moment: dt.datetime) -> dt.datetime:
    """``moment`` as an aware datetime, which cron's fire times are: a naive one (a project with
    ``USE_TZ = False``, whose clock and rows are read naive) is in the project's ``TIME_ZONE``,
    as Django writes and reads them there. Exact in the hour that happens twice when clocks go
    back: a time read from the database keeps its ``fold``."""
    if timezone.is_aware(moment):
        return moment
    return timezone.make_aware(moment, timezone.get_default_timezone())


def first_fire(expression: str, time_zone: str, now: dt.datetime | None = None) -> dt.datetime:
    """The first fire time after ``now`` (None: the present, taken aware: naive, it would be
    ambiguous in the hour that happens twice) of a new or changed schedule."""
    now = instant(now) if now is not None else dt.datetime.now(dt.timezone.utc)
    return cron.next_after(expression, time_zone_of(time_zone), now)


class Due(NamedTuple):
    """What ``due()`` found: the clock it used, the schedules due, the next fire time of the
    others (None: no other active schedule)."""

    now: dt.datetime
    schedules: list[dict[str, Any]]
    next_wake: dt.datetime | None


def due(
    connection: Connection,
    now: dt.datetime | None = None,
    limit: int = 100,
    job_names: Iterable[str] | None = None,
) -> Due:
    """The due schedules of ``job_names`` (None: the jobs registered here), oldest first; of
    those declared in code, only the ones whose job here still declares ``cron=``."""
    known = registry.registered()
    names = sorted(known if job_names is None else job_names)
    cron_jobs = [name for name in names if name in known and known[name].cron is not None]
    params = {"now": now, "limit": limit, "job_names": names, "cron_jobs": cron_jobs}
    rows = db.execute(connection, "schedules_due", params)
    first, next_wake = rows[0], rows[0]["next_wake"]
    schedules = [row for row in rows if row["id"] is not None]
    return Due(instant(first["db_now"]), schedules, next_wake and instant(next_wake))


def fire(
    connection: Connection,
    schedule: dict[str, Any],
    definition: Any,
    fire_time: dt.datetime,
    next_fire: dt.datetime | None,
    manual: bool = False,
) -> int | None:
    """Enqueue ``definition`` (a ``JobDefinition``) for one fire time; the job's id, ``SKIPPED``
    when a job holding its unique key is ready or running (the fire time is spent), or None
    when that time was fired already (or the schedule changed or was paused meanwhile)."""
    rows = db.execute(
        connection,
        "fire_schedule",
        {
            "schedule_id": schedule["id"],
            "changed_at": schedule.get("changed_at"),
            "fire_time": fire_time,
            "next_fire": next_fire,
            "manual": manual,
            "name": definition.name,
            "queue": definition.get_queue(),
            "priority": definition.priority,
            "args": json.dumps(schedule["args"]),
            "kwargs": json.dumps(schedule["kwargs"]),
            "max_attempts": definition.get_max_attempts(),
            "keep_result": definition.keep_result,
            "unique_key": unique_key_of(definition, schedule["args"], schedule["kwargs"]),
            "task_backend": definition.task_backend,
            "version": getattr(definition, "version", 1),
            **(flow_params(definition, None, definition.get_queue()) or WITHOUT_FLOW),
            "notify": get_config().LISTEN_NOTIFY,
        },
    )
    if not rows:
        return None
    return SKIPPED if rows[0]["job_id"] is None else rows[0]["job_id"]


def unfit(definition: Any, args: Any, kwargs: Any) -> str | None:
    """Why a schedule's arguments cannot be enqueued for its job (they no longer fit its
    signature, or its unique key cannot be computed from them, or its queue lives on another
    database than the schedules: they fire on ``PGJOBS["DATABASE"]`` only); None: they can."""
    if (problem := elsewhere(definition)) is not None:
        return problem
    try:
        definition.check_arguments(args, kwargs)
        flow_params(definition, None, definition.get_queue())  # limits that cannot combine
    except (TypeError, ValueError) as error:
        return str(error)
    try:
        unique_key_of(definition, args, kwargs)
    except (TypeError, ValueError) as error:
        return str(error)
    except Exception as error:  # the project's own function: a KeyError, an AttributeError...
        return f"its unique_key function raised {type(error).__name__}: {error}"
    return None


def elsewhere(definition: Any) -> str | None:
    """Why a schedule cannot fire ``definition``: its queue lives on another database than the
    schedules (``PGJOBS["QUEUE_DATABASES"]``), whose fire writes the job in its own transaction.
    None: it can."""
    queue, config = definition.get_queue(), get_config()
    alias = config.QUEUE_DATABASES.get(queue, config.DATABASE)
    if alias == config.DATABASE:
        return None
    return (
        f"its queue {queue!r} lives on the database {alias!r} (PGJOBS['QUEUE_DATABASES']), and "
        f"schedules fire their jobs on PGJOBS['DATABASE'] ({config.DATABASE!r}) only"
    )


SKIPPED = 0  # fire(): the job was not enqueued, one holding its unique key is in flight
#: fire_schedule's flow parameters for a job without flow control (no key, no limits).
WITHOUT_FLOW = {"flow_key": None, "concurrency_limit": None, "rate": None, "burst": None}


def unique_key_of(definition: Any, args: list, kwargs: dict) -> str | None:
    """The unique key the job's ``@job(unique_key=...)`` gives these arguments, as enqueue()
    computes it (None: no key)."""
    return unique_key_of_call(definition, args, kwargs)


def advance(connection: Connection, schedule: dict[str, Any], next_fire: dt.datetime) -> bool:
    """Move the next fire time without firing; False when someone changed it first."""
    with connection.cursor() as cursor:
        cursor.execute(
            query("advance_schedule"),
            {
                "schedule_id": schedule["id"],
                "changed_at": schedule["changed_at"],
                "expected": schedule["next_fire_at"],
                "next_fire": next_fire,
            },
        )
        return cursor.rowcount == 1


def jobs_connection() -> Connection:
    return db.jobs_connection()


def run_now(connection: Connection, schedule, definition: Any) -> int | None:
    """Enqueue a schedule's job now (the admin's "run now"), paused or not: the job's id,
    ``SKIPPED`` when a job holding its unique key is in flight, or None when nothing was
    fired: the schedule's row is gone (deleted since ``schedule`` was read: the fire locks the
    row, so a delete being committed is waited for), or another run now of it took this very
    microsecond."""
    row = {"id": schedule.pk, "args": schedule.args, "kwargs": schedule.kwargs}
    return fire(connection, row, definition, timezone.now(), None, manual=True)


def declared_values(declared: cron.Cron) -> tuple:
    """What a ``Cron`` writes on its row, comparable with ``row_values``."""
    return (
        declared.expression,
        declared.time_zone or "",
        json.loads(json.dumps(list(declared.args))),
        json.loads(json.dumps(declared.kwargs)),
        declared.catch_up,
    )


def row_values(row: dict[str, Any]) -> tuple:
    return (row["cron"], row["time_zone"], row["args"], row["kwargs"], row["catch_up"])


def sync_declared(
    connection: Connection, definitions: Iterable[Any], now: dt.datetime | None = None
) -> dict[str, int]:
    """Write each ``@job(cron=...)`` as its schedule row, its next fire time the first after
    ``now`` (None: the present); counts of inserted and updated."""
    counts = {"inserted": 0, "updated": 0}
    definitions = list(definitions)
    for definition in definitions:
        declared = definition.cron
        rows = db.execute(
            connection,
            "sync_schedule",
            {
                "name": definition.name,
                "cron": declared.expression,
                "time_zone": declared.time_zone or "",
                "args": json.dumps(list(declared.args)),
                "kwargs": json.dumps(declared.kwargs),
                "catch_up": declared.catch_up,
                "next_fire": first_fire(declared.expression, declared.time_zone or "", now),
            },
        )
        for row in rows:
            counts[row["what"]] += 1
    names = [definition.name for definition in definitions]
    for row in db.execute(connection, "schedules_shadowed", {"job_names": names}):
        logger.warning(
            "the schedule declared by @job(cron=...) of %s is not used: a schedule of that name "
            "added in the admin is, with the admin's definition",
            row["name"],
        )
    return counts


def prune_fires(connection: Connection, keep_seconds: float, limit: int = 10_000) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            query("prune_schedule_fires"), {"keep_seconds": keep_seconds, "limit": limit}
        )
        return cursor.rowcount
