"""Putting jobs in the queue: one INSERT on the caller's connection.

Inside ``transaction.atomic()`` the job becomes visible to workers exactly when the caller
commits and vanishes on rollback; there is no ``on_commit`` indirection. Every argument and
option is checked before the statement runs, so a bad call raises and writes nothing (and leaves
the caller's transaction usable).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.utils import timezone

from . import db, registry, signals
from .conf import get_config
from .models import Job
from .payload import dump_arguments
from .registry import JobDefinition, check_unique_key

__all__ = ["enqueue", "enqueue_definition", "enqueue_many"]


def enqueue(job: JobDefinition | str, *args: Any, **kwargs: Any) -> Job:
    """Enqueue ``job`` (a ``@job`` function or its registered name) with these arguments."""
    return enqueue_definition(registry.resolve(job), args, kwargs)


def _row_params(definition: JobDefinition, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    config = get_config()
    args_json, kwargs_json = dump_arguments(args, kwargs, config.MAX_PAYLOAD_BYTES)
    try:
        # the worker would dead-letter a job whose arguments do not fit; say so to the caller
        definition.check_arguments(list(args), kwargs)
    except TypeError as error:
        raise TypeError(f"arguments do not fit {definition.name}: {error}") from None
    unique_key = definition.fixed_unique_key
    if unique_key is None and definition.unique_key is not None:
        unique_key = check_unique_key(definition.unique_key(*args, **kwargs))
    run_after = definition.run_after
    if definition.delay:
        run_after = timezone.now() + timedelta(seconds=definition.delay)
    return {
        "name": definition.name,
        "queue": definition.get_queue(),
        "priority": definition.priority,
        "args": args_json,
        "kwargs": kwargs_json,
        "run_after": run_after,
        "max_attempts": definition.get_max_attempts(),
        "unique_key": unique_key,
    }


def _to_job(row: dict[str, Any], alias: str) -> Job:
    fields = [f.attname for f in Job._meta.concrete_fields]
    return Job.from_db(alias, fields, [row[name] for name in fields])


def enqueue_definition(definition: JobDefinition, args: tuple | list, kwargs: dict) -> Job:
    params = _row_params(definition, args, kwargs)
    config = get_config()
    connection = db.jobs_connection()
    rows = db.execute_prepared(
        connection, "enqueue_job", {**params, "notify": config.LISTEN_NOTIFY}
    )
    if rows:
        job = _to_job(rows[0], connection.alias)
        signals.job_enqueued.send(sender=Job, job=job, created=True)
        return job
    # A job with this unique_key is already ready or running: hand back that one.
    existing = db.execute(
        connection, "find_in_flight_by_unique_key", {"unique_key": params["unique_key"]}
    )
    if not existing:  # it finished between the two statements; enqueue again
        return enqueue_definition(definition, args, kwargs)
    job = _to_job(existing[0], connection.alias)
    signals.job_enqueued.send(sender=Job, job=job, created=False)
    return job


def enqueue_many(
    definition: JobDefinition | str, calls: Iterable[tuple | list | tuple[tuple, dict]]
) -> list[Job]:
    """Enqueue many jobs of one kind in a single INSERT.

    ``calls`` yields either an ``args`` tuple/list or an ``(args, kwargs)`` pair whose second
    item is a dict. Jobs whose unique key is already in flight are skipped: the returned list
    holds the inserted jobs only.
    """
    definition = registry.resolve(definition)
    columns: dict[str, list[Any]] = {
        key: []
        for key in (
            "names",
            "queues",
            "priorities",
            "args",
            "kwargs",
            "run_afters",
            "max_attempts",
            "unique_keys",
        )
    }
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
        params = _row_params(definition, call_args, call_kwargs)
        columns["names"].append(params["name"])
        columns["queues"].append(params["queue"])
        columns["priorities"].append(params["priority"])
        columns["args"].append(params["args"])
        columns["kwargs"].append(params["kwargs"])
        columns["run_afters"].append(params["run_after"])
        columns["max_attempts"].append(params["max_attempts"])
        columns["unique_keys"].append(params["unique_key"])
    if not columns["names"]:
        return []
    connection = db.jobs_connection()
    rows = db.execute_prepared(
        connection, "enqueue_jobs", {**columns, "notify": get_config().LISTEN_NOTIFY}
    )
    jobs = [_to_job(row, connection.alias) for row in rows]
    for job in jobs:
        signals.job_enqueued.send(sender=Job, job=job, created=True)
    return jobs
