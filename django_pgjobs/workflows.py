"""Workflows: ``chain`` and ``group`` of steps (``my_job.s(*args, **kwargs)``), written in one
statement and run one step after the other (docs/howto/workflows.md).

``chain(a.s(1), group(b.s(i) for i in ids), c.s())`` is a workflow of three steps: ``a``, then
the group's jobs (concurrently), then ``c`` once every one of them has succeeded (a chord).
``enqueue()`` inserts a ``pgjobs_workflow`` row and every job of every step in one statement on
the jobs database's connection: inside ``transaction.atomic()`` the whole workflow commits or
rolls back with the caller's writes. The first step's jobs are ``ready``; the later ones are
``blocked`` (never claimed) until the statement completing the last job of the step before makes
them ready (``sql/queries.sql``: advance_workflows), so progress is counted in the database.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from django.db import OperationalError, transaction

from . import db, operations, routing
from .calls import CallOptions
from .conf import get_config
from .context import current_job
from .enqueueing import JobSpec, _call_values, _shared_params
from .flow import flow_params
from .uniqueness import rules_for
from .wakeups import wake_after_commit, wakes_after_commit

__all__ = ["Chain", "Group", "Step", "abort_workflow", "chain", "group", "previous_results"]


@dataclasses.dataclass(frozen=True)
class Step:
    """One job of a workflow with its arguments: what ``my_job.s(...)`` returns (options from
    ``my_job.using(...)``)."""

    definition: JobSpec
    options: CallOptions
    args: tuple
    kwargs: dict

    def enqueue(self):
        """A workflow of this one step."""
        return chain(self).enqueue()


@dataclasses.dataclass(frozen=True)
class Group:
    """Steps run concurrently; in a chain, the step after waits for every one of them."""

    steps: tuple[Step, ...]

    def enqueue(self):
        return chain(self).enqueue()


@dataclasses.dataclass(frozen=True)
class Chain:
    """Steps (a ``Step`` or a ``Group`` each) run one after the other."""

    steps: tuple[Step | Group, ...]

    def enqueue(self):
        """Write the workflow and all its jobs in one statement; returns the saved
        ``Workflow`` (``job_ids``: the ids of its jobs, step by step)."""
        return _enqueue(self)


def group(*steps: Step | Iterable[Step]) -> Group:
    """``group(a.s(1), b.s(2))`` or ``group(resize.s(i) for i in ids)``."""
    first = steps[0] if len(steps) == 1 else None
    members: tuple = tuple(first) if first is not None and not isinstance(first, Step) else steps
    for step in members:
        if not isinstance(step, Step):
            raise TypeError(f"a group holds steps (my_job.s(...)), not {step!r}")
    if not members:
        raise ValueError("a group needs at least one step")
    return Group(members)


def chain(*items: Step | Group | Chain) -> Chain:
    """``chain(a.s(1), b.s(2), c.s())``: each step runs after the one before succeeded. A chain
    inside a chain adds its steps in place."""
    steps: list[Step | Group] = []
    for item in items:
        if isinstance(item, Chain):
            steps.extend(item.steps)
        elif isinstance(item, (Step, Group)):
            steps.append(item)
        else:
            raise TypeError(f"a chain holds steps and groups, not {item!r}")
    if not steps:
        raise ValueError("a chain needs at least one step")
    return Chain(tuple(steps))


_COLUMNS = (
    "names", "queues", "priorities", "args", "kwargs", "run_afters", "max_attempts",
    "timeouts", "keep_results", "task_backends", "versions", "steps", "members",
)  # fmt: skip


def _rows(workflow: Chain) -> tuple[dict[str, list[Any]], list[int]]:
    """The statement's columns (parallel arrays, one entry per job) and each step's size."""
    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    sizes = []
    for index, item in enumerate(workflow.steps):
        members = item.steps if isinstance(item, Group) else (item,)
        sizes.append(len(members))
        for member, step in enumerate(members):
            if not rules_for(step.definition, step.options).plain or step.options.unique_key:
                raise ValueError(f"{step.definition.name}: a workflow step takes no unique key")
            args_json, kwargs_json, unique_key = _call_values(
                step.definition, step.options, step.args, step.kwargs
            )
            if unique_key is not None:
                raise ValueError(f"{step.definition.name}: a workflow step takes no unique key")
            params = _shared_params(step.definition, step.options)
            if flow_params(step.definition, step.options, params["queue"]):
                raise ValueError(
                    f"{step.definition.name}: a workflow step takes no flow control yet "
                    "(concurrency_limit, rate_limit, concurrency_key, fairness_key, a queue rate "
                    "limit): it would run without its limits"
                )
            for column, value in zip(
                _COLUMNS,
                (params["name"], params["queue"], params["priority"], args_json, kwargs_json,
                 params["run_after"], params["max_attempts"], params["timeout"],
                 params["keep_result"], params["task_backend"], params["version"], index,
                 member),
                strict=True,
            ):  # fmt: skip
                columns[column].append(value)
    return columns, sizes


def _name(workflow: Chain) -> str:
    parts = []
    for item in workflow.steps:
        if isinstance(item, Group):
            names = dict.fromkeys(step.definition.name for step in item.steps)
            parts.append(f"group({', '.join(names)}) x{len(item.steps)}")
        else:
            parts.append(item.definition.name)
    return " > ".join(parts)[:255]


def _enqueue(workflow: Chain):
    from .models import Workflow

    columns, sizes = _rows(workflow)
    groups = [index for index, item in enumerate(workflow.steps) if isinstance(item, Group)]
    connection = routing.one_database(columns["queues"], f"the workflow {_name(workflow)!r}")
    listen = get_config().LISTEN_NOTIFY
    after_commit = listen and wakes_after_commit(connection)
    params = {
        **columns,
        "workflow_name": _name(workflow),
        "sizes": json.dumps(sizes),
        "groups": json.dumps(groups),
        "first_size": sizes[0],
        "notify": listen and not after_commit,
    }
    (row,) = db.execute(connection, "enqueue_workflow", params)
    if after_commit:
        for queue in dict.fromkeys(
            q for q, s in zip(columns["queues"], columns["steps"], strict=True) if s == 0
        ):
            connection.on_commit(wake_after_commit(connection.alias, queue), robust=True)
    saved = Workflow(
        id=row["workflow_id"],
        name=params["workflow_name"],
        remaining=sizes[0],
        sizes=sizes,
        groups=groups,
        created_at=row["created_at"],
    )
    saved._state.adding = False
    saved._state.db = connection.alias
    saved.job_ids = row["ids"]
    return saved


def previous_results(*, using: str | None = None) -> Any:
    """Inside a step: the results of the step before it (its jobs must keep them:
    ``my_job.using(keep_result=True).s(...)``): the return value of a single job, or the list of
    a group's return values in the group's order. Raises ``LookupError`` outside a workflow step
    after the first, and when a job of the step before kept no result (it did not keep it, or
    the result was pruned): never a shorter list, out of the group's order."""
    job = current_job()
    if job is None:
        raise LookupError("previous_results() is called inside a job")
    connection = db.jobs_connection(using or job.database or None)
    rows = db.execute(connection, "workflow_previous_results", {"id": job.id})
    if not rows or rows[0]["step"] is None:
        raise LookupError(f"job #{job.id} is not a step after the first of a workflow")
    step, size, kept = rows[0]["step"], rows[0]["size"], rows[0]["kept"]
    if kept < size:
        raise LookupError(
            f"previous_results(): {size - kept} of the {size} jobs of step {step} of workflow "
            f"#{job.workflow_id} kept no result; give them keep_result=True "
            "(my_job.using(keep_result=True).s(...)), and keep results longer than the "
            "workflow runs (KEEP_RESULTS_SECONDS)"
        )
    results = rows[0]["result"] or []
    if size > 1 or rows[0]["is_group"]:  # a group of one job too: a list of one
        return results
    return results[0] if results else None


def abort_workflow(
    workflow_id: int, *, using: str | None = None, requested_by: str = "abort_workflow()"
) -> dict[str, Any]:
    """Abort a workflow: its waiting jobs are cancelled, its running ones (held ones included:
    they never start) have their abort requested (``django_pgjobs.abort``). Returns ``aborted``
    (False: it had already finished), ``cancelled`` (how many jobs) and ``requested`` (the
    running jobs' ids)."""
    connection = db.jobs_connection(using)
    requested_by = requested_by[:200]
    for attempt in range(DEADLOCK_TRIES):
        try:
            return _abort_workflow(connection, workflow_id, requested_by)
        except OperationalError as error:
            # the abort locks the workflow's row, then its jobs'; a step completing meanwhile
            # holds its job's row and waits for the workflow's (advance_workflows): PostgreSQL
            # ends one of the two after deadlock_timeout. The abort, rolled back whole, goes
            # again (outside a caller's transaction only: inside one, it is the caller's)
            deadlock = getattr(error.__cause__, "sqlstate", None) == "40P01"
            if not deadlock or connection.in_atomic_block or attempt + 1 == DEADLOCK_TRIES:
                raise
    raise AssertionError("unreachable")


#: How many times abort_workflow() goes again after a deadlock with a completing step.
DEADLOCK_TRIES = 3


def _abort_workflow(connection, workflow_id: int, requested_by: str) -> dict[str, Any]:
    with transaction.atomic(using=connection.alias):
        db.execute(connection, "lock_workflow", {"id": workflow_id})  # see queries.sql
        (row,) = db.execute(
            connection, "abort_workflow", {"id": workflow_id, "requested_by": requested_by}
        )
        if not row["aborted"]:
            return {"aborted": False, "cancelled": row["cancelled"], "requested": []}
        # a statement of its own: it sees the jobs claimed while the abort waited for their rows
        running = db.ids_of(db.execute(connection, "workflow_running_jobs", {"id": workflow_id}))
        # cancel_waiting: a running step that failed meanwhile is waiting for its retry
        requested, cancelled = operations.abort_jobs(
            connection, running, requested_by=requested_by, cancel_waiting=True
        )
    return {"aborted": True, "cancelled": row["cancelled"] + len(cancelled), "requested": requested}
