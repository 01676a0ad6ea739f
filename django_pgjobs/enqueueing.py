"""Putting jobs in the queue: one INSERT on the caller's connection.

Inside ``transaction.atomic()`` the job becomes visible to workers exactly when the caller
commits and vanishes on rollback; there is no ``on_commit`` indirection. Every argument and
option is checked before the statement runs, so a bad call raises and writes nothing (and leaves
the caller's transaction usable).

A row's columns come from the job's definition (``JobSpec``: what this module reads of a
``registry.JobDefinition``, which it never imports) and the call's ``CallOptions``. A job with a
unique key follows the rules of ``uniqueness`` (scope, debounce, throttle), each decided by its
one statement; the job returned says what happened (``job.enqueue_outcome``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol

from django.db.models.base import ModelState
from django.utils import timezone

from . import db, routing, signals, tracing, wakeups
from .calls import CallOptions
from .conf import get_config
from .context import current_job
from .flow import FLOW_WAKE_PREFIX, flow_params
from .models import Job
from .payload import dump_arguments
from .uniqueness import EnqueueOutcome, UniqueRules, rules_for
from .validation import unique_key_of_call

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
    @property
    def unique_rules(self) -> UniqueRules: ...
    def gives_unique_rules(self) -> bool: ...
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
        unique_key = unique_key_of_call(definition, args, kwargs)
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
        **tracing.enqueue_params(),  # the trace context: None without OpenTelemetry
        "version": getattr(definition, "version", 1),  # a task's payload has no version
    }


def _to_job(row: dict[str, Any], alias: str) -> Job:
    fields = [f.attname for f in Job._meta.concrete_fields]
    return Job.from_db(alias, fields, [row[name] for name in fields])


def enqueue_call(
    definition: JobSpec, options: CallOptions, args: tuple | list, kwargs: dict
) -> Job:
    """Insert one job; returns the saved ``Job``, or the job already in flight with its
    unique key (``enqueue_outcome`` says which)."""
    params = _row_params(definition, options, args, kwargs)
    flow = _flow_of(definition, options, params)
    connection = routing.enqueue_connection(params["queue"])
    if params["unique_key"] is not None:
        rules = rules_for(definition, options)
        if not rules.waiting and rules.throttle is None:  # a throttled one: in its statement
            _hand_over_own_key([params["unique_key"]], connection)
        if not rules.plain:
            return _enqueue_keyed(definition, options, (args, kwargs), params, rules, connection)
    elif _rules_without_key(definition, options):
        raise ValueError(
            f"{definition.name}: unique_scope, debounce and throttle apply to a unique key: give "
            "@job(unique_key=...) or .using(unique_key=...)"
        )
    config = get_config()
    # a job with flow control wakes the flow claim of its queue's workers (listener.py)
    wake = FLOW_WAKE_PREFIX + params["queue"] if flow else params["queue"]
    after_commit = config.LISTEN_NOTIFY and wakeups.wakes_after_commit(connection)
    notify = (
        config.LISTEN_NOTIFY
        and not after_commit
        and wakeups.notify_in_statement(connection, {**params, "queue": wake})
    )
    statement = "enqueue_job_flow" if flow else "enqueue_job"
    rows = db.execute_prepared(connection, statement, {**params, **flow, "notify": notify})
    if notify and rows and params["run_after"] is None and connection.get_autocommit():
        wakeups.delivered(connection.alias, wake)  # the statement has committed
    if rows:
        (row,) = rows
        if after_commit and row["run_after"] <= row["created_at"]:  # due now
            # discarded with the job if the transaction (or its savepoint) rolls back; the
            # skip rule is applied at the commit, against notifications really delivered
            connection.on_commit(wakeups.wake_after_commit(connection.alias, wake), robust=True)
        sent = [(*_as_stored(params["args"], params["kwargs"]), params["unique_key"])]
        (job,) = _jobs_from_inserted(
            [row["id"]],
            [row["unique_key"]],
            row["run_after"],
            row["created_at"],
            sent,
            params,
            connection.alias,
        )
        job.flow_key = flow.get("flow_key")
        signals.job_enqueued.send(sender=Job, job=job, created=True, outcome=EnqueueOutcome.CREATED)
        return job
    # A job with this unique_key is already ready or running: hand back that one.
    existing = _holder(connection, params["unique_key"], waiting=False)
    if existing is None:  # it finished between the two statements; enqueue again
        return enqueue_call(definition, options, args, kwargs)
    return _skipped(existing)


def _flow_of(definition: JobSpec, options: CallOptions, params: dict[str, Any]) -> dict[str, Any]:
    """The flow key the job waits on and its limits (``flow``); a job with one takes a unique
    key with the default rules only."""
    flow = flow_params(definition, options, params["queue"])
    if flow and params["unique_key"] is not None and not rules_for(definition, options).plain:
        raise ValueError(
            f"{definition.name}: unique_scope, debounce and throttle are not available for "
            "jobs with flow control (concurrency, rate limit, fairness key) yet"
        )
    return flow


def _enqueue_keyed(
    definition: JobSpec,
    options: CallOptions,
    call: tuple,
    params: dict,
    rules: UniqueRules,
    connection: Any,
) -> Job:
    """Insert, replace (debounce) or skip a job with a unique key, in the one statement of its
    rules; a skipped call returns the job holding the key."""
    if rules.debounce:
        statement = "enqueue_job_waiting_debounced" if rules.waiting else "enqueue_job_debounced"
    elif rules.throttle is not None:
        statement = "enqueue_job_waiting_throttled" if rules.waiting else "enqueue_job_throttled"
    else:
        statement = "enqueue_job_waiting"
    config = get_config()
    after_commit = config.LISTEN_NOTIFY and wakeups.wakes_after_commit(connection)
    key = params["unique_key"]
    running = current_job()
    statement_params = {
        **params,
        **rules.params(key),
        "notify": config.LISTEN_NOTIFY and not after_commit,
        "running_id": running.id if running else None,  # the throttled hand-over
        "running_token": running.claim_token if running else None,
    }
    rows = db.execute(connection, statement, statement_params)
    if not rows:
        holder = _holder(connection, key, waiting=rules.waiting)
        if holder is None and rules.throttle is None:  # it left between the two statements
            return enqueue_call(definition, options, *call)
        return _skipped(holder or _unsaved(statement_params, connection.alias))
    (row,) = rows
    outcome = EnqueueOutcome.CREATED if row.pop("created") else EnqueueOutcome.REPLACED
    del row["_notified"]
    job = _to_job(row, connection.alias)
    job.enqueue_outcome = outcome
    if after_commit and job.run_after <= timezone.now():  # due now
        connection.on_commit(wakeups.wake_after_commit(connection.alias, job.queue), robust=True)
    signals.job_enqueued.send(
        sender=Job, job=job, created=outcome is EnqueueOutcome.CREATED, outcome=outcome
    )
    return job


def _rules_without_key(definition: JobSpec, options: CallOptions) -> bool:
    """Whether unique rules were given to a job that has no unique key to apply them to."""
    if getattr(definition, "unique_key", None) is not None:
        return False  # its function gave no key for these arguments: a job like any other
    return definition.gives_unique_rules() or options.gives_unique_rules()


def _hand_over_own_key(unique_keys: list[str | None], connection: Any) -> None:
    """A running job enqueueing its own key (scope ``in_flight``) gives it to the job it
    enqueues: without this, the new job would find the key held by the running one and a job
    that reschedules itself would end its chain. No statement outside a job, nor without keys.
    Keys are held per database: none is handed over to a job written on another database."""
    running = current_job()
    keys = [key for key in unique_keys if key is not None]
    if running is not None and keys and running.database in ("", connection.alias):
        db.execute(
            connection,
            "hand_over_unique_key",
            {"id": running.id, "token": running.claim_token, "unique_keys": keys},
        )


def _holder(connection, unique_key: str, *, waiting: bool) -> Job | None:
    """The job holding ``unique_key`` now (in its scope), if one does."""
    statement = "find_waiting_by_unique_key" if waiting else "find_in_flight_by_unique_key"
    rows = db.execute(connection, statement, {"unique_key": unique_key})
    return _to_job(rows[0], connection.alias) if rows else None


def _skipped(job: Job) -> Job:
    job.enqueue_outcome = EnqueueOutcome.SKIPPED
    signals.job_enqueued.send(sender=Job, job=job, created=False, outcome=job.enqueue_outcome)
    return job


def _unsaved(params: dict[str, Any], alias: str) -> Job:
    """What a throttled enqueue returns when it is skipped and no job holds its key: the job it
    would have written, unsaved (``id`` None)."""
    args, kwargs = _as_stored(params["args"], params["kwargs"])
    job = Job(
        **{
            name: params[name]
            for name in ("name", "queue", "priority", "max_attempts", "timeout", "keep_result")
        },
        args=args,
        kwargs=kwargs,
        unique_key=params["unique_key"],  # the key in the column of its scope
        waiting_key=params["waiting_key"],
        kept_waiting_key=params["waiting_key"],
        task_backend=params["task_backend"],
        run_after=params["run_after"] or timezone.now(),
    )
    job._state.db = alias
    return job


#: The parameters of enqueue_jobs every call shares (enqueue_many has no task backend).
_MANY_SHARED = (
    "name queue priority run_after max_attempts timeout keep_result trace_context_json version"
)


def enqueue_many(
    definition: JobSpec, options: CallOptions, calls: Iterable[tuple | list | tuple[tuple, dict]]
) -> list[Job]:
    """Enqueue many jobs of one kind in a single INSERT.

    ``calls`` yields either an ``args`` tuple/list or an ``(args, kwargs)`` pair whose second
    item is a dict. Jobs whose unique key is already in flight are skipped: the returned list
    holds the inserted jobs only. A running job enqueueing its own key hands it over, as with
    ``enqueue()``.
    """
    if not rules_for(definition, options).plain:
        raise ValueError(
            f"{definition.name}: enqueue_many takes the default unique rules only (scope "
            "'in_flight', a held key skipped); enqueue jobs with unique_scope='waiting', "
            "debounce or throttle one by one"
        )
    inputs, columns = _many_calls(definition, options, calls)
    if not inputs:
        return []
    if flow_params(definition, options, options.queue or definition.get_queue()):
        # one statement per job: each tells the key's row (enqueue_job_flow)
        jobs = [enqueue_call(definition, options, args, kwargs) for args, kwargs, _ in inputs]
        return [job for job in jobs if job.enqueue_outcome is EnqueueOutcome.CREATED]
    params, notify = _shared_params(definition, options), get_config().LISTEN_NOTIFY
    connection = routing.enqueue_connection(params["queue"])
    _hand_over_own_key(columns["unique_keys"], connection)
    rows = db.execute_prepared(
        connection,
        "enqueue_jobs",
        {**columns, **{name: params[name] for name in _MANY_SHARED.split()}, "notify": notify},
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
            signals.job_enqueued.send(
                sender=Job, job=job, created=True, outcome=EnqueueOutcome.CREATED
            )
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
        inputs.append((*_as_stored(args_json, kwargs_json), unique_key))
    return inputs, columns


def _as_stored(args_json: str, kwargs_json: str) -> tuple[list, dict]:
    """The arguments as the row holds them, read back from the JSON written (tuples are lists
    there): the ``Job`` that ``enqueue()`` returns equals the row, and what the handler gets."""
    return json.loads(args_json), json.loads(kwargs_json)


#: The columns of a job just inserted by ``enqueue_jobs`` that do not depend on the call.
_NEW_ROW = {
    "status": "ready",
    "flow_key": None,
    "attempts": 0,
    "started_at": None,
    "finished_at": None,
    "lease_expires_at": None,
    "claim_token": None,
    "worker": "",
    "result": None,
    "waiting_key": None,
    "kept_waiting_key": None,
    "progress": None,
    "metadata": None,
}
#: ... and those the statement's parameters give.
_FROM_PARAMS = (
    "name queue priority max_attempts timeout keep_result task_backend version trace_context"
).split()


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
        **_NEW_ROW,
        **{name: params[name] for name in _FROM_PARAMS},
        "run_after": run_after,
        "created_at": created_at,
        "enqueue_outcome": EnqueueOutcome.CREATED,
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
        job.repairs, job.replayed_from = [], None
        job._state = ModelState()
        job._state.adding = False
        job._state.db = alias
        jobs.append(job)
        pair = next(returned, None)
    if pair is not None or len(jobs) != len(ids):
        raise RuntimeError("enqueue_jobs returned rows that match no input")
    return jobs
