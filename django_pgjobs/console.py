"""What ``manage.py pgjobs`` does: the admin's numbers and actions for a shell.

Every reading is the dashboard's (``overview``, ``admin.dashboard``) and every change is
the admin action's operation (``admin.actions``, ``admin.queues``): one statement of
``django_pgjobs.operations`` per batch of rows, the same rows, the same message ("Requeued 12
jobs."). A selection is read in batches of ``BULK_LIMIT`` ids in id order (the admin's cap on
one action), each batch acted on by one statement; rows left alone (claimed meanwhile, a unique
key held) are reported, never read twice.

The command has no user: whoever can run ``manage.py`` with the project's settings can reach
the database anyway. Nothing is changed without a selection (ids or a filter).
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from . import db, operations, overview, registry
from .admin.actions import DEAD_LETTER_ACTIONS, JOB_ACTIONS, Action
from .admin.base import BULK_LIMIT, plural
from .admin.dashboard import worker_rows
from .admin.dead_letters import GONE
from .admin.jobs import LEASE_EXPIRED, jobs_in_view, view_ordering, views_condition
from .admin.queues import set_queue_paused
from .conf import get_config, job_databases
from .metrics import WAIT_BUCKET_BOUNDS
from .models import DeadLetter, Job, Worker
from .states import View

#: The ``--state`` values of ``list``: the admin's job views.
JOB_STATES = tuple(
    str(view)
    for view in (
        View.DUE,
        View.SCHEDULED,
        View.RETRYING,
        View.RUNNING,
        LEASE_EXPIRED,
        View.SUCCESSFUL,
    )
)
#: The ``--state`` values of ``purge``: the views the admin's cancel applies to.
WAITING_STATES = tuple(str(view) for view in sorted(JOB_ACTIONS["cancel"].views))
#: Who the command is, in the audit trail of the jobs it requeues (the admin's: the admin user).
COMMAND = "manage.py pgjobs"

logger = logging.getLogger("django_pgjobs")


class BadInput(ValueError):
    """An argument naming nothing: an unknown queue, an id with no row."""


@dataclass(frozen=True)
class Selection:
    """Which rows: ids and filters, all of them applying (AND)."""

    ids: tuple[int, ...] = ()
    queue: str | None = None
    name: str | None = None
    state: str | None = None  # a job view (jobs only)
    error_type: str | None = None  # dead letters only
    died_within: float | None = None  # seconds; dead letters only (the admin's "died within")
    older_than: float | None = None  # seconds; dead letters only

    @property
    def empty(self) -> bool:
        return not (
            self.ids
            or self.queue
            or self.name
            or self.state
            or self.error_type
            or self.died_within
            or self.older_than
        )


@dataclass
class Outcome:
    """What an action did: how many rows it touched (their ids when they are worth printing),
    the admin's message, and what it left alone and why."""

    message: str
    count: int = 0
    ids: list[int] = field(default_factory=list)
    left_alone: str = ""  # the admin's note on selected rows left alone, or ""
    dry_run: bool = False


#: The jobs database the functions below act on (``on_database``); None: ``PGJOBS["DATABASE"]``,
#: and ``status()`` reads every jobs database.
_database: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pgjobs_console_database", default=None
)


@contextmanager
def on_database(alias: str | None) -> Iterator[None]:
    """Act on the jobs database ``alias`` (``PGJOBS["DATABASE"]`` or one of
    ``PGJOBS["QUEUE_DATABASES"]``) within the block."""
    if alias is not None and alias not in job_databases():
        raise BadInput(f"{alias!r} holds no queue; jobs databases: {', '.join(job_databases())}")
    token = _database.set(alias)
    try:
        yield
    finally:
        _database.reset(token)


def connection():
    return db.jobs_connection(_database.get())


def _rows(model, alias: str | None = None):
    return model._default_manager.using(alias or _database.get() or get_config().DATABASE)


def check_queue_known(queue: str | None) -> None:
    """``BadInput`` unless ``queue`` is None or a queue in use (a registered job's, or one some
    row names): a typo must not select nothing silently, nor pause a queue nobody uses."""
    if queue is None:
        return
    known = registry.queues_in_use(connection())
    if queue not in known:
        raise BadInput(f"unknown queue {queue!r}; queues in use: {', '.join(sorted(known))}")


# -- status -------------------------------------------------------------------------------------


def _seconds(value: float | None) -> tuple[float | None, bool]:
    """A wait percentile as (seconds, True when it is past the last bucket: at least that)."""
    if value == float("inf"):
        return WAIT_BUCKET_BOUNDS[-1], True
    return value, False


def queue_status(queue: overview.QueueOverview) -> dict[str, Any]:
    p95, p95_over = _seconds(queue.wait_p95)
    p99, p99_over = _seconds(queue.wait_p99)
    return {
        "queue": queue.name,
        "paused": queue.paused,
        "due": queue.due,
        "scheduled": queue.scheduled,
        "retrying": queue.retrying,
        "retrying_capped": queue.retrying_capped,
        "running": queue.running,
        "lease_expired": queue.lease_expired,
        "estimated": queue.estimated,
        "dead_letters": queue.dead_letters,
        "dead_letters_capped": queue.dead_letters_capped,
        "dead_letters_last_hour": queue.dead_letters_last_hour,
        "oldest_due_seconds": queue.oldest_due_seconds,
        "wait_p95_seconds": p95,
        "wait_p99_seconds": p99,
        "wait_over_last_bucket": p95_over or p99_over,
        "wait_samples": queue.wait_samples,
        "throughput_per_minute": round(queue.throughput_per_minute, 3),
        "succeeded_last_hour": queue.succeeded_60m,
        "failed_last_hour": queue.failed_60m,
        "failure_rate": queue.failure_rate,
    }


def status() -> dict[str, Any]:
    """The dashboard's numbers, JSON-ready: per queue, totals, and the workers; of every jobs
    database (each queue and worker says its ``database``), or of the one ``on_database``
    names."""
    now = timezone.now()
    chosen = _database.get()
    every: list[overview.QueueOverview] = []
    queues: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    for alias in [chosen] if chosen else job_databases():
        conn = db.jobs_connection(alias)
        found, _ = overview.queue_overview(conn, now=now)
        every += found
        queues += [{**queue_status(q), "database": alias} for q in found]
        registered = worker_rows(_rows(Worker, alias), now, registry.queues_in_use(conn))
        workers += [{**_worker_status(w), "database": alias} for w in registered]
    totals = {
        key: sum(getattr(q, key) for q in every)
        for key in ("due", "scheduled", "retrying", "running", "lease_expired", "dead_letters")
    }
    return {
        "measured_at": now.isoformat(),
        "queues": queues,
        "totals": totals,
        "workers_alive": sum(1 for w in workers if w["alive"]),
        "workers": workers,
    }


def _worker_status(w: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": w["worker"].id,
        "hostname": w["worker"].hostname,
        "pid": w["worker"].pid,
        "queues": w["queues"],
        "concurrency": w["worker"].concurrency,
        "alive": w["alive"],
        "started_at": w["worker"].started_at.isoformat(),
        "last_seen_at": w["worker"].last_seen_at.isoformat(),
        "unused_queues": w["unused"],
    }


# -- list ---------------------------------------------------------------------------------------


def _job_queryset(selection: Selection):
    jobs = _rows(Job).all()
    if selection.ids:
        jobs = jobs.filter(id__in=selection.ids)
    if selection.queue is not None:
        jobs = jobs.filter(queue=selection.queue)
    if selection.name is not None:
        jobs = jobs.filter(name=selection.name)
    return jobs_in_view(jobs, selection.state)


def _dead_letter_queryset(selection: Selection):
    rows = _rows(DeadLetter).all()
    if selection.ids:
        rows = rows.filter(id__in=selection.ids)
    for key in ("queue", "name", "error_type"):
        if getattr(selection, key) is not None:
            rows = rows.filter(**{key: getattr(selection, key)})
    now = timezone.now()
    if selection.died_within is not None:
        rows = rows.filter(failed_at__gt=now - timedelta(seconds=selection.died_within))
    if selection.older_than is not None:
        rows = rows.filter(failed_at__lt=now - timedelta(seconds=selection.older_than))
    return rows


def _error_text(error: object) -> str:
    if not isinstance(error, dict):
        return ""
    text = f"{error.get('type') or 'Error'}: {error.get('message') or ''}"
    return " ".join(text.split())[:200]


def _time(value) -> str | None:
    return value.isoformat() if value else None


def list_jobs(selection: Selection, limit: int) -> list[dict[str, Any]]:
    """Jobs of ``selection`` in the admin's order for its view, at most ``limit``."""
    check_queue_known(selection.queue)
    jobs = _job_queryset(selection).order_by(*view_ordering(selection.state))[:limit]
    return [
        {
            "id": job.id,
            "name": job.name,
            "queue": job.queue,
            "priority": job.priority,
            "state": job.view,
            "attempts": job.attempts,
            "max_attempts": job.max_attempts,
            "run_after": _time(job.run_after),
            "created_at": _time(job.created_at),
            "lease_expires_at": _time(job.lease_expires_at),
            "worker": job.worker,
            "last_error": _error_text(job.last_error),
        }
        for job in jobs
    ]


def list_dead_letters(selection: Selection, limit: int) -> list[dict[str, Any]]:
    """Dead letters of ``selection``, newest first (the admin's order), at most ``limit``."""
    check_queue_known(selection.queue)
    rows = _dead_letter_queryset(selection).order_by("-failed_at", "-id")[:limit]
    return [
        {
            "id": row.id,
            "job_id": row.job_id,
            "name": row.name,
            "queue": row.queue,
            "error_type": row.error_type,
            "reason": " ".join(row.reason.split())[:200],
            "attempts": row.attempts,
            "max_attempts": row.max_attempts,
            "failed_at": _time(row.failed_at),
        }
        for row in rows
    ]


# -- actions ------------------------------------------------------------------------------------


def _missing_ids(queryset, ids: Sequence[int], noun: str) -> None:
    if not ids:
        return
    found = set(queryset.filter(id__in=ids).values_list("id", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        raise BadInput(f"no {noun} with id {', '.join(f'#{i}' for i in missing)}")


def _run_in_batches(
    queryset,
    action: Action,
    noun: str,
    why_left: str,
    dry_run: bool,
    named: int = 0,
    requested_by: str = COMMAND,
) -> Outcome:
    """The admin's ``action`` on the ids of ``queryset``, in id order, ``BULK_LIMIT`` at a time,
    one statement each (``action.operation``). ``dry_run``: count them, change nothing.
    ``named``: how many ids the operator named (those the filters leave out are left alone).
    ``requested_by``: who the audit trail and a workflow's reason name, for the actions that
    record it."""
    if dry_run:
        selected = queryset.count()
        return Outcome(f"Would {action.name} {plural(selected, noun)}.", selected, dry_run=True)
    conn = connection()
    touched: list[int] = []
    selected = after = 0
    # the rows selected now, not those that join the selection meanwhile: a requeued job that
    # fails again within seconds is a new dead letter of the same filters, and was requeued by
    # a later batch, again and again while the failures kept pace
    last = queryset.order_by("-id").values_list("id", flat=True).first() or 0
    while True:
        batch = list(
            queryset.filter(id__gt=after, id__lte=last)
            .order_by("id")
            .values_list("id", flat=True)[:BULK_LIMIT]
        )
        if not batch:
            break
        selected += len(batch)
        if action.records_user:
            touched += action.operation(conn, batch, requested_by=requested_by)
        else:
            touched += action.operation(conn, batch)
        after = batch[-1]
    note = left_alone(max(selected, named) - len(touched), noun, why_left)
    return Outcome(action.message(len(touched)), len(touched), sorted(touched), note)


def left_alone(skipped: int, noun: str, why: str) -> str:
    """The admin's note on selected rows left alone, or ""."""
    if not skipped:
        return ""
    was = "was" if skipped == 1 else "were"
    return f"{plural(skipped, 'selected ' + noun)} {was} left alone ({why})."


def dead_letters_of(selection: Selection):
    """The dead letters of ``selection``; ``BadInput`` without ids or a filter, for an unknown
    queue, or an id with no dead letter."""
    if selection.empty:
        raise BadInput(
            "name dead letters by id or by a filter (--queue, --name, --error-type, "
            "--died-within, --older-than)"
        )
    check_queue_known(selection.queue)
    _missing_ids(_rows(DeadLetter), selection.ids, "dead letter")
    return _dead_letter_queryset(selection)


def act_on_dead_letters(action_name: str, selection: Selection, dry_run: bool = False) -> Outcome:
    """Requeue or delete the dead letters of ``selection`` (the admin's actions)."""
    queryset = dead_letters_of(selection)
    action = DEAD_LETTER_ACTIONS[action_name]
    named = len(selection.ids)
    return _run_in_batches(queryset, action, "dead letter", GONE, dry_run, named)


def purge(selection: Selection, dry_run: bool = False) -> Outcome:
    """Cancel (delete) the waiting jobs of ``selection``: the admin's cancel. Running jobs are
    never touched (abort them in the admin)."""
    if selection.empty:
        raise BadInput("purge needs a filter (--queue, --name, --state) or job ids")
    check_queue_known(selection.queue)
    _missing_ids(_rows(Job), selection.ids, "job")
    action = JOB_ACTIONS["cancel"]
    queryset = _job_queryset(selection).filter(views_condition(action.views))
    why = f"only {action.valid_for} jobs are cancelled; a running one is its worker's"
    # named in the reason of the workflow a cancelled step ends
    by = f"{COMMAND} purge"
    return _run_in_batches(queryset, action, "job", why, dry_run, len(selection.ids), by)


def pause(queue: str, paused: bool) -> Outcome:
    """Pause or resume ``queue`` (the admin's buttons); says so when nothing changed."""
    check_queue_known(queue)
    conn = connection()
    was_paused = queue in operations.paused_queues(conn)
    set_queue_paused(conn, queue, paused)
    verb = "Paused" if paused else "Resumed"
    if was_paused == paused:
        return Outcome(f"{verb} queue {queue} (it was already {verb.lower()}).", 1)
    return Outcome(f"{verb} queue {queue}.", 1)


def as_json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=False)
