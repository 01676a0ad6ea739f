"""Putting jobs in the queue: one INSERT on the caller's connection.

Inside ``transaction.atomic()`` the job becomes visible to workers exactly when the caller
commits and vanishes on rollback; there is no ``on_commit`` indirection. Every argument and
option is checked before the statement runs, so a bad call raises and writes nothing (and leaves
the caller's transaction usable).

A row's columns come from the job's definition (``JobSpec``: what this module reads of a
``registry.JobDefinition``, which it never imports) and the call's ``CallOptions``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol

from django.db import connections
from django.db.models.base import ModelState
from django.utils import timezone

from . import db, signals
from .calls import CallOptions
from .conf import get_config
from .models import Job
from .payload import dump_arguments
from .validation import check_unique_key

__all__ = ["JobSpec", "enqueue_call", "enqueue_many"]


class JobSpec(Protocol):
    """What enqueueing reads of a job's definition (``registry.JobDefinition`` and
    ``task_rows.TaskDefinition`` are ones)."""

    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def keep_result(self) -> bool: ...
    @property
    def unique_key(self) -> Callable[..., str | None] | None: ...
    @property
    def task_backend(self) -> str: ...
    def get_queue(self) -> str: ...
    def get_max_attempts(self) -> int: ...
    def check_arguments(self, args: Any, kwargs: Any) -> None: ...


def _row_params(
    definition: JobSpec, options: CallOptions, args: tuple | list, kwargs: dict
) -> dict[str, Any]:
    args_json, kwargs_json, unique_key = _call_values(definition, options, args, kwargs)
    return {
        **_shared_params(definition, options),
        "args": args_json,
        "kwargs": kwargs_json,
        "unique_key": unique_key,
    }


def _call_values(
    definition: JobSpec, options: CallOptions, args: tuple | list, kwargs: dict
) -> tuple[str, str, str | None]:
    """What differs from call to call: the checked JSON arguments and the unique key."""
    args_json, kwargs_json = dump_arguments(args, kwargs, get_config().MAX_PAYLOAD_BYTES)
    try:
        # the worker would dead-letter a job whose arguments do not fit; say so to the caller
        definition.check_arguments(list(args), kwargs)
    except TypeError as error:
        raise TypeError(f"arguments do not fit {definition.name}: {error}") from None
    unique_key = options.unique_key
    if unique_key is None and definition.unique_key is not None:
        unique_key = check_unique_key(definition.unique_key(*args, **kwargs))
    return args_json, kwargs_json, unique_key


def _shared_params(definition: JobSpec, options: CallOptions) -> dict[str, Any]:
    """What every call with one definition and one set of options shares: each option given
    wins over the definition's."""
    run_after = options.run_after
    if options.delay:
        run_after = timezone.now() + timedelta(seconds=options.delay)
    return {
        "name": definition.name,
        "queue": options.queue or definition.get_queue(),
        "priority": definition.priority if options.priority is None else options.priority,
        "run_after": run_after,
        "max_attempts": options.max_attempts or definition.get_max_attempts(),
        "timeout": options.timeout,  # None: the worker applies the definition's
        "keep_result": (
            definition.keep_result if options.keep_result is None else options.keep_result
        ),
        "task_backend": definition.task_backend,
    }


def _to_job(row: dict[str, Any], alias: str) -> Job:
    fields = [f.attname for f in Job._meta.concrete_fields]
    return Job.from_db(alias, fields, [row[name] for name in fields])


#: Seconds during which a process sends at most one notification per queue: NOTIFY serializes
#: commits (docs/explanation/notifications.md, docs/explanation/notify-in-transactions.md).
NOTIFY_COALESCE_SECONDS = 0.01
#: When this process last delivered a notification, per (database alias, queue).
_last_notified: dict[tuple[str, str], float] = {}


def _notified_recently(alias: str, queue: str) -> bool:
    """True when this process delivered a notification for ``queue`` less than
    NOTIFY_COALESCE_SECONDS ago: a job committed now is seen by the woken workers' next claim."""
    last = _last_notified.get((alias, queue), float("-inf"))
    return time.monotonic() - last < NOTIFY_COALESCE_SECONDS


def _delivered(alias: str, queue: str) -> None:
    _last_notified[(alias, queue)] = time.monotonic()


def _notify_after_commit(alias: str, queue: str) -> None:
    if not _notified_recently(alias, queue):
        db.execute(connections[alias], "notify_queue", {"queue": queue})
        _delivered(alias, queue)


def _wake_after_commit(alias: str, queue: str):
    """The on_commit callback for one wake-up: a named function, not a functools.partial
    (Django 5.2 logs a failed robust callback by its ``__qualname__``, which a partial lacks, so
    the logging itself would raise out of the caller's commit)."""

    def wake_queue_after_commit() -> None:
        _notify_after_commit(alias, queue)

    return wake_queue_after_commit


def _wakes_after_commit(connection) -> bool:
    """Inside ``transaction.atomic()`` the wake-up goes out after the commit, not with the
    INSERT: a NOTIFY in the caller's transaction would hold the cluster-wide notify lock through
    its commit, so every such transaction would commit alone. Only when Django will run
    ``on_commit`` callbacks at that commit (not under manual transaction management)."""
    return connection.in_atomic_block and connection.commit_on_exit


def _notify_in_statement(connection, params: dict[str, Any]) -> bool:
    """Whether the INSERT itself notifies. In autocommit it commits at once: skip when this
    process notified the queue less than NOTIFY_COALESCE_SECONDS ago. Under manual transaction
    management the notification is delivered at a commit that may come much later: always send
    it (PostgreSQL folds a transaction's identical notifications into one). A job that is not
    due now sends none (the SQL checks) and does not count."""
    if not connection.get_autocommit() or params["run_after"] is not None:
        return True
    return not _notified_recently(connection.alias, params["queue"])


def enqueue_call(
    definition: JobSpec, options: CallOptions, args: tuple | list, kwargs: dict
) -> Job:
    """Insert one job; returns the saved ``Job``, or the job already in flight with its
    unique key."""
    params = _row_params(definition, options, args, kwargs)
    config = get_config()
    connection = db.jobs_connection()
    after_commit = config.LISTEN_NOTIFY and _wakes_after_commit(connection)
    notify = config.LISTEN_NOTIFY and not after_commit and _notify_in_statement(connection, params)
    rows = db.execute_prepared(connection, "enqueue_job", {**params, "notify": notify})
    if notify and rows and params["run_after"] is None and connection.get_autocommit():
        _delivered(connection.alias, params["queue"])  # the statement has committed
    if rows:
        (row,) = rows
        if after_commit and row["run_after"] <= row["created_at"]:  # due now
            # discarded with the job if the transaction (or its savepoint) rolls back; the
            # skip rule is applied at the commit, against notifications really delivered
            connection.on_commit(_wake_after_commit(connection.alias, params["queue"]), robust=True)
        sent = [(list(args), dict(kwargs), params["unique_key"])]
        (job,) = _jobs_from_inserted(
            [row["id"]],
            [row["unique_key"]],
            row["run_after"],
            row["created_at"],
            sent,
            params,
            connection.alias,
        )
        signals.job_enqueued.send(sender=Job, job=job, created=True)
        return job
    # A job with this unique_key is already ready or running: hand back that one.
    existing = db.execute(
        connection, "find_in_flight_by_unique_key", {"unique_key": params["unique_key"]}
    )
    if not existing:  # it finished between the two statements; enqueue again
        return enqueue_call(definition, options, args, kwargs)
    job = _to_job(existing[0], connection.alias)
    signals.job_enqueued.send(sender=Job, job=job, created=False)
    return job


def enqueue_many(
    definition: JobSpec, options: CallOptions, calls: Iterable[tuple | list | tuple[tuple, dict]]
) -> list[Job]:
    """Enqueue many jobs of one kind in a single INSERT.

    ``calls`` yields either an ``args`` tuple/list or an ``(args, kwargs)`` pair whose second
    item is a dict. Jobs whose unique key is already in flight are skipped: the returned list
    holds the inserted jobs only.
    """
    inputs, columns = _many_calls(definition, options, calls)
    if not inputs:
        return []
    params = _shared_params(definition, options)
    connection = db.jobs_connection()
    rows = db.execute_prepared(
        connection,
        "enqueue_jobs",
        {
            **columns,
            "name": params["name"],
            "queue": params["queue"],
            "priority": params["priority"],
            "run_after": params["run_after"],
            "max_attempts": params["max_attempts"],
            "timeout": params["timeout"],
            "keep_result": params["keep_result"],
            "notify": get_config().LISTEN_NOTIFY,
        },
    )
    (row,) = rows
    jobs = _jobs_from_inserted(
        row["ids"],
        row["unique_keys"],
        row["run_after"],
        row["created_at"],
        inputs,
        params,
        connection.alias,
    )
    if signals.job_enqueued.has_listeners(Job):
        for job in jobs:
            signals.job_enqueued.send(sender=Job, job=job, created=True)
    return jobs


def _many_calls(
    definition: JobSpec, options: CallOptions, calls: Iterable[Any]
) -> tuple[list[tuple[list, dict, str | None]], dict[str, list[Any]]]:
    """Each call checked, as sent (arguments and unique key) and as the statement's columns."""
    inputs: list[tuple[list, dict, str | None]] = []
    columns: dict[str, list[Any]] = {"args": [], "kwargs": [], "unique_keys": []}
    for call in calls:
        if (
            isinstance(call, tuple)
            and len(call) == 2
            and isinstance(call[1], dict)
            and isinstance(call[0], (tuple, list))
        ):
            call_args, call_kwargs = call
        elif isinstance(call, (tuple, list)):
            call_args, call_kwargs = call, {}
        else:
            raise TypeError(
                f"each call must be an args tuple/list or an (args, kwargs) pair, not {call!r}"
            )
        args_json, kwargs_json, unique_key = _call_values(
            definition, options, call_args, call_kwargs
        )
        columns["args"].append(args_json)
        columns["kwargs"].append(kwargs_json)
        columns["unique_keys"].append(unique_key)
        inputs.append((list(call_args), dict(call_kwargs), unique_key))
    return inputs, columns


def _jobs_from_inserted(
    ids: list[int],
    unique_keys: list[str | None],
    run_after: Any,
    created_at: Any,
    inputs: list[tuple[list, dict, str | None]],
    params: dict[str, Any],
    alias: str,
) -> list[Job]:
    """Build the saved jobs from what the statement returned (ids and unique keys in input
    order, the times all of them share) and what was sent; an input whose unique key was in
    flight has no id.

    The jobs are built as Django builds unpickled instances (``__new__`` and their state, no
    ``__init__``, so no ``pre_init``/``post_init`` signals): a bulk enqueue of no-op jobs spent
    more time in ``Model.__init__`` than in PostgreSQL.
    """
    common = {
        "name": params["name"],
        "queue": params["queue"],
        "priority": params["priority"],
        "status": "ready",
        "run_after": run_after,
        "attempts": 0,
        "max_attempts": params["max_attempts"],
        "timeout": params["timeout"],
        "created_at": created_at,
        "started_at": None,
        "finished_at": None,
        "lease_expires_at": None,
        "claim_token": None,
        "worker": "",
        "keep_result": params["keep_result"],
        "result": None,
        "task_backend": params["task_backend"],
        "progress": None,
        "metadata": None,
    }
    jobs = []
    returned = zip(ids, unique_keys, strict=True)
    pair = next(returned, None)
    for args, kwargs, unique_key in inputs:
        if pair is None:
            break
        if unique_key is not None and pair[1] != unique_key:
            continue  # this one was not inserted: its key is in flight
        job = Job.__new__(Job)
        job.__dict__.update(
            common, id=pair[0], unique_key=unique_key, args=args, kwargs=kwargs, errors=[]
        )
        job._state = ModelState()
        job._state.adding = False
        job._state.db = alias
        jobs.append(job)
        pair = next(returned, None)
    if pair is not None or len(jobs) != len(ids):
        raise RuntimeError("enqueue_jobs returned rows that match no input")
    return jobs
