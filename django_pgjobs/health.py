"""``pgjobs/health``: is the job system doing its work? 200 when it is, 503 when not.

Three checks, read from the database like the admin dashboard (``overview``):

``database``
    The jobs database answers (and holds the jobs tables); with queues on several databases
    (``PGJOBS["QUEUE_DATABASES"]``), each of them does: every check reads every one.
``workers``
    Each queue with a due job has a live worker that serves it (``overview.live_workers``).
``backlog``
    No queue's oldest due job has waited longer than ``HEALTH_MAX_DUE_AGE_SECONDS``.

Paused queues are left out of the last two: their backlog is an operator's decision. The body is
small JSON; only a reader who may see the numbers (``access``) gets the queues behind a failing
check, so ``HEALTH_PUBLIC`` can open the endpoint without telling anyone a queue name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import DatabaseError, connections

from . import overview
from .conf import job_databases
from .db import JobsTableMissing
from .operations import paused_queues, queue_names


@dataclass(frozen=True)
class Health:
    database: bool = True
    queues_without_worker: tuple[str, ...] = ()
    late_queues: dict[str, float] = field(default_factory=dict)  # queue: seconds waited
    #: With queues on several databases: those that did not answer (named to readers only).
    databases_failing: tuple[str, ...] = ()

    @property
    def checks(self) -> dict[str, str]:
        """Each check's outcome: ok, failing, or unknown (the database did not answer)."""
        if not self.database:
            return {"database": "failing", "workers": "unknown", "backlog": "unknown"}
        return {
            "database": "ok",
            "workers": "failing" if self.queues_without_worker else "ok",
            "backlog": "failing" if self.late_queues else "ok",
        }

    @property
    def ok(self) -> bool:
        return all(outcome == "ok" for outcome in self.checks.values())

    def body(self, details: bool) -> dict:
        """The response's JSON; ``details``: name the queues behind a failing check."""
        body: dict = {
            "status": "ok" if self.ok else "failing",
            "checks": self.checks,
        }
        if details and self.queues_without_worker:
            body["queues_without_worker"] = list(self.queues_without_worker)
        if details and self.late_queues:
            body["oldest_due_seconds"] = {q: round(s, 1) for q, s in self.late_queues.items()}
        if details and self.databases_failing:
            body["databases_failing"] = list(self.databases_failing)
        return body


def check_health(connection, max_due_age_seconds: float) -> Health:
    """Run the three checks on ``connection`` (the jobs database)."""
    try:
        paused = set(paused_queues(connection))
        active = [name for name in queue_names(connection) if name not in paused]
        heads = overview.oldest_due(connection, active)
        workers = overview.live_workers(connection) if active else []
        unserved = [name for name in active if not any(w.serves(name) for w in workers)]
        # jobs waiting on a flow key are not in `heads` (their lateness is their key's limits),
        # but a queue of them that no worker serves is not served at all
        flow_only = overview.queues_with_due_flow_jobs(
            connection, [name for name in unserved if name not in heads]
        )
    except (DatabaseError, JobsTableMissing):
        return Health(database=False)
    return Health(
        queues_without_worker=tuple(
            sorted(name for name in unserved if name in heads or name in flow_only)
        ),
        late_queues={
            name: waited
            for name, (_, waited) in sorted(heads.items())
            if waited > max_due_age_seconds
        },
    )


def check_every_database(max_due_age_seconds: float) -> Health:
    """The three checks on every jobs database (``PGJOBS["DATABASE"]`` and those of
    ``PGJOBS["QUEUE_DATABASES"]``), as one: a check fails when it fails on any of them."""
    found = {
        alias: check_health(connections[alias], max_due_age_seconds) for alias in job_databases()
    }
    if len(found) == 1:
        return next(iter(found.values()))
    answered = [health for health in found.values() if health.database]
    return Health(
        database=len(answered) == len(found),
        queues_without_worker=tuple(
            sorted({queue for health in answered for queue in health.queues_without_worker})
        ),
        late_queues={
            queue: waited for health in answered for queue, waited in health.late_queues.items()
        },
        databases_failing=tuple(alias for alias, health in found.items() if not health.database),
    )
