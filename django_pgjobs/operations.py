"""The database contract: every change of a job's state, one function per step.

The worker, the admin actions and the test helpers all go through these functions; each runs one
named statement of ``sql/queries.sql`` (the function shares the statement's name), except
``complete()``, the one way jobs succeed, which picks the completion statement (carrying a claim
or not) from its arguments and the retention setting. Functions that act on a claimed job are
fenced: they take the claim token and do nothing when the job is no longer held under that token
(its lease expired and it was rescued, maybe claimed again), so a worker that lost its lease can
never complete or fail a job someone else now holds.

No plan is kept between runs: a generic plan made while the queue idled would scan the whole
table through the next burst (the claim alone may run prepared, planned at every run; see
docs/explanation/claim.md). Fencing: docs/explanation/leases.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from . import db, flow
from .claims import Claim, ClaimBuilder, ClaimedJob, ClaimPlan  # noqa: F401 (the last two: re-exported)
from .conf import get_config
from .validation import check_queue

Connection = BaseDatabaseWrapper

#: The partial unique index of jobs' unique keys while they are ready or running.
UNIQUE_KEY_IN_FLIGHT = "pgjobs_job_unique_key_in_flight"
#: The unique indexes a requeue's insert may hit when a concurrent enqueue takes a key.
REQUEUE_KEY_INDEXES = (UNIQUE_KEY_IN_FLIGHT, "pgjobs_job_waiting_key")


# -- claiming and finishing ---------------------------------------------------------------------


def _pairs(jobs: Iterable[ClaimedJob]) -> dict[str, list[Any]]:
    jobs = list(jobs)
    return {"ids": [j.id for j in jobs], "tokens": [j.claim_token for j in jobs]}


class Completed(NamedTuple):
    ids: set[int]  # the jobs completed; a missing id was no longer held under its token
    claimed: list[ClaimedJob]  # the jobs the claim carrying the completion took


def complete(
    connection: Connection,
    jobs: Sequence[ClaimedJob] = (),
    *,
    results: Sequence[str] | None = None,
    claim: Claim | None = None,
) -> Completed:
    """Finish successful jobs, fenced by their claim token: the one way a job succeeds.

    ``jobs`` are deleted, or kept as ``successful`` while ``KEEP_SUCCEEDED_SECONDS`` is on.
    ``results``: jobs that keep their result (``keep_result``) are kept as ``successful`` with
    their return values (JSON texts, in the order of ``jobs``). Runs in the caller's transaction
    when it has one: an atomic job completes in its own.

    ``claim`` (``ClaimBuilder.claim``): the same statement also claims, one round trip for both
    (the worker's hot path); ``claimed`` holds the jobs it took. With no jobs, the claim alone.
    A claim that skips names (a kind's slots full) is windowed (``claim_jobs_skipping``).
    Prepared when the claim says so (``db.execute_prepared_replanned``). Jobs of workflows go
    to a statement that also counts them (``complete_workflow_jobs``).
    """
    if any(job.workflow_id is not None for job in jobs):
        return _complete_with_workflow_steps(connection, jobs, results, claim)
    skipping = claim is not None and not claim.params["any_name"]  # claim_jobs_skipping's
    if not jobs:
        if claim is None:
            return Completed(set(), [])
        execute = db.execute_prepared_replanned if claim.prepared else db.execute
        name = "claim_jobs_skipping" if skipping else "claim_jobs"
        rows = execute(connection, name, claim.params)
        return Completed(set(), [claim.job(row, connection.alias) for row in rows])
    if results is not None:
        name = "complete_with_results_and_claim_jobs" if claim else "complete_jobs_with_results"
        name = "complete_with_results_and_claim_jobs_skipping" if skipping else name
    elif get_config().KEEP_SUCCEEDED_SECONDS > 0:
        name = "complete_retained_and_claim_jobs" if claim else "complete_jobs_retained"
        name = "complete_retained_and_claim_jobs_skipping" if skipping else name
    else:
        name = "complete_and_claim_jobs" if claim else "complete_jobs"
        name = "complete_and_claim_jobs_skipping" if skipping else name
    params = _done(jobs, results)
    if claim is None:
        return Completed(set(db.ids_of(db.execute(connection, name, params))), [])
    completed: set[int] = set()
    claimed = []
    execute = db.execute_prepared_replanned if claim.prepared else db.execute  # as claim alone
    for row in execute(connection, name, {**claim.params, **params}):
        acknowledged = row.pop("completed")
        if row["id"] is None:  # the one row that carries the completed ids
            completed.update(acknowledged)
        else:
            claimed.append(claim.job(row, connection.alias))
    return Completed(completed, claimed)


class FlowClaimed(NamedTuple):
    claimed: list[ClaimedJob]  # the jobs the flow claim took
    wait: float | None  # seconds until a key it looked at is due again (None: none is)


def claim_jobs_flow(connection: Connection, claim: Claim, lanes: int) -> FlowClaimed:
    """Claim due jobs that have a flow key (``flow``), their limits decided in the statement
    (``claim_jobs_flow``; docs/explanation/flow-control.md), looking at ``lanes`` keys at most.
    ``claim`` is built as for ``complete(..., claim=...)``: the same stamping, the same rows."""
    claimed, wait = [], None
    for row in db.execute(connection, "claim_jobs_flow", {**claim.params, "lanes": lanes}):
        flow_wait = row.pop("flow_wait")
        if row["id"] is None:  # the one row that carries the wait
            wait = flow_wait
        else:
            claimed.append(claim.job(row, connection.alias))
    return FlowClaimed(claimed, wait)


def _complete_with_workflow_steps(
    connection: Connection,
    jobs: Sequence[ClaimedJob],
    results: Sequence[str] | None,
    claim: Claim | None,
) -> Completed:
    """``complete()`` of a batch holding jobs of workflows: those first, counted in their
    statement, then the others (and the claim) as usual."""
    steps = [i for i, job in enumerate(jobs) if job.workflow_id is not None]
    others = [i for i, job in enumerate(jobs) if job.workflow_id is None]

    def part(indexes: list[int]) -> tuple[list[ClaimedJob], list[str] | None]:
        return [jobs[i] for i in indexes], None if results is None else [
            results[i] for i in indexes
        ]

    step_jobs, step_results = part(steps)
    retained = get_config().KEEP_SUCCEEDED_SECONDS > 0
    name = "complete_workflow_jobs_retained" if retained else "complete_workflow_jobs"
    name = "complete_workflow_jobs_with_results" if step_results is not None else name
    done = set(db.ids_of(db.execute(connection, name, _done(step_jobs, step_results))))
    other_jobs, other_results = part(others)
    rest = complete(connection, other_jobs, results=other_results, claim=claim)
    return Completed(done | rest.ids, rest.claimed)


def _done(jobs: Sequence[ClaimedJob], results: Sequence[str] | None) -> dict[str, list[Any]]:
    """The parameters of the jobs to complete (and their results)."""
    params = _pairs(jobs)
    if results is not None:
        if len(results) != len(params["ids"]):
            raise ValueError(f"{len(params['ids'])} jobs to complete, {len(results)} results")
        params["results"] = list(results)
    return params


def retry_job(
    connection: Connection, job: ClaimedJob, error: dict[str, Any], delay_seconds: float
) -> bool:
    params = {"id": job.id, "token": job.claim_token, "delay_seconds": delay_seconds}
    return bool(db.execute(connection, "retry_job", {**params, "error": json.dumps([error])}))


def dead_letter_job(
    connection: Connection, job: ClaimedJob, *, reason: str, error: dict[str, Any]
) -> int | None:
    """Move a held job to the dead-letter table; returns the dead letter's id (None if fenced)."""
    rows = db.execute(
        connection,
        "dead_letter_job",
        {
            "id": job.id,
            "token": job.claim_token,
            "reason": reason,
            "error_type": error.get("type", ""),
            "error": json.dumps([error]),
        },
    )
    return rows[0]["id"] if rows else None


def dead_letter_aborted(
    connection: Connection, job: ClaimedJob, *, summary: str, error: dict[str, Any]
) -> int | None:
    """Move a held job whose attempt ended as aborted to the dead-letter table (error type
    ``Aborted``, reason naming who requested it); returns the dead letter's id (None if fenced)."""
    rows = db.execute(
        connection,
        "dead_letter_aborted",
        {"id": job.id, "token": job.claim_token, "summary": summary, "error": json.dumps([error])},
    )
    return rows[0]["id"] if rows else None


def mark_started(connection: Connection, started: Sequence[tuple[ClaimedJob, float]]) -> set[int]:
    """Record the start of held jobs (``(job, seconds since it started)``): their attempt
    counted. Returns the ids recorded; a missing id was no longer held, or already recorded."""
    if not started:
        return set()
    params = _pairs(job for job, _ in started)
    params["ago"] = [max(0.0, ago) for _, ago in started]
    return set(db.ids_of(db.execute(connection, "mark_started", params)))


def release_jobs(connection: Connection, jobs: Sequence[ClaimedJob]) -> set[int]:
    """Hand claimed-but-unstarted jobs back without spending their attempt."""
    if not jobs:
        return set()
    return set(db.ids_of(db.execute(connection, "release_jobs", _pairs(jobs))))


def defer_unknown_jobs(
    connection: Connection, jobs: Sequence[ClaimedJob], *, grace_seconds: float, delay: float
) -> set[int]:
    """Hand back, due in ``delay`` seconds with their attempt unspent, the jobs among ``jobs``
    (names this worker does not know) enqueued less than ``grace_seconds`` ago; their ids."""
    params = {**_pairs(jobs), "grace_seconds": grace_seconds, "delay": delay}
    return {row["id"] for row in db.execute(connection, "defer_unknown_jobs", params)}


def extend_leases(connection: Connection, jobs: Sequence[ClaimedJob]) -> set[int]:
    """Heartbeat; returns the ids still held (the others were rescued or have ended)."""
    return heartbeat(connection, jobs).kept


class Heartbeat(NamedTuple):  # a job in neither kept nor taken ended under its claim, or is gone
    kept: set[int]  # leases extended: still held under this claim
    abort_requested: set[int]  # of those, the ones with an abort requested
    taken: set[int]  # rescued: their row has another claim token now, or none


def heartbeat(connection: Connection, jobs: Sequence[ClaimedJob]) -> Heartbeat:
    """``extend_leases``, saying which jobs are kept, asked to abort, and taken elsewhere."""
    params = {**_pairs(jobs), "lease_seconds": [j.lease_seconds for j in jobs]}
    rows = db.execute(connection, "extend_leases", params) if jobs else []
    return Heartbeat(*({row["id"] for row in rows if row[k]} for k in Heartbeat._fields))


# -- maintenance --------------------------------------------------------------------------------


class Rescued(NamedTuple):
    requeued: int  # started: back to ready with a LeaseExpired entry
    dead_lettered: int
    returned_unstarted: int  # held and never started: back as they were, attempt not spent


def rescue(connection: Connection, limit: int = 1000) -> Rescued:
    """Requeue (or dead-letter, when out of attempts) jobs whose lease expired; give back the
    held ones that never started with their attempt unspent."""
    row = db.execute(connection, "rescue_expired", {"limit": limit})[0]
    return Rescued(row["requeued"], row["dead_lettered"], row["returned"])


def rescue_expired(connection: Connection, limit: int = 1000) -> tuple[int, int]:
    """``rescue()`` as ``(requeued, dead_lettered)``; requeued counts the jobs given back
    unstarted as well."""
    rescued = rescue(connection, limit)
    return rescued.requeued + rescued.returned_unstarted, rescued.dead_lettered


def prune_succeeded(
    connection: Connection,
    keep_seconds: float,
    keep_results_seconds: float | None = None,
    limit: int = 10_000,
) -> int:
    """Delete successful jobs finished more than ``keep_seconds`` ago, or ``keep_results_seconds``
    ago for jobs that kept their result (default ``PGJOBS["KEEP_RESULTS_SECONDS"]``); returns
    how many."""
    if keep_results_seconds is None:
        keep_results_seconds = get_config().KEEP_RESULTS_SECONDS
    params = {
        "keep_seconds": keep_seconds,
        "keep_results_seconds": keep_results_seconds,
        "limit": limit,
    }
    return len(db.execute(connection, "prune_succeeded", params))


def prune_throttle_windows(connection: Connection) -> int:
    """Delete the throttle windows past their end; returns how many."""
    return len(db.execute(connection, "prune_throttle_windows"))


def find_job_result(connection: Connection, job_id: int) -> dict[str, Any] | None:
    """The row of job ``job_id`` in pgjobs_job, or else its dead letter (status ``failed``)."""
    rows = db.execute(connection, "find_job_result", {"id": job_id})
    return rows[0] if rows else None


def queue_names(connection: Connection) -> list[str]:
    """Every queue with jobs, dead letters, a pause or statistics of the last hour."""
    return [row["name"] for row in db.execute(connection, "job_queue_names")]


def paused_queues(connection: Connection) -> list[str]:
    return [row["name"] for row in db.execute(connection, "paused_queues")]


def set_queue_paused(connection: Connection, queue: str, paused: bool) -> None:
    db.execute(connection, "set_queue_paused", {"name": check_queue(queue), "paused": paused})


# -- operator actions (admin) -------------------------------------------------------------------


def requeue_dead_letters(
    connection: Connection, ids: Sequence[int], *, requested_by: str | None = None
) -> list[int]:
    """``requeue_dead_letters_spread`` with every job due now; the new job ids."""
    spread = requeue_dead_letters_spread(connection, ids, 0.0, requested_by=requested_by)
    return [job_id for job_id, _ in spread]


def requeue_dead_letters_spread(
    connection: Connection,
    ids: Sequence[int],
    spacing_seconds: float,
    *,
    requested_by: str | None = None,
    previous_due: datetime | None = None,
) -> list[tuple[int, datetime]]:
    """Requeue dead letters as fresh jobs in one statement (their workflows locked first), due
    ``spacing_seconds`` apart (oldest first; the first now, or after ``previous_due``); returns
    their ``(id, due time)``; ``requested_by`` goes to each new job's trail (``repairs``).

    A dead letter whose unique key is held by a ready or running job (scope ``waiting``: by a
    waiting job) stays, and of several selected dead letters sharing a key only the newest is
    requeued; one of the scope ``waiting`` waits holding its key again. When a concurrent enqueue
    or requeue inserts the same key between the statement's check and its insert, the statement
    fails as a whole (nothing moved) inside a savepoint and runs once more: the second run sees
    the committed job and leaves that dead letter where it is. A flow key the pruner deleted
    meanwhile is written again with the limits its jobs' code gives it now
    (``flow.requeued_key_limits``).
    """
    action = "requeue" if not spacing_seconds else f"replay, {1 / spacing_seconds:g} a second"
    params = {"ids": list(ids), "spacing": spacing_seconds, "previous_due": previous_due}
    params |= {"requested_by": requested_by, "action": action}
    params |= flow.requeued_key_limits(connection, ids)
    for last_try in (False, True):
        try:
            with transaction.atomic(using=connection.alias):
                db.execute(connection, "lock_dead_letter_workflows", {"ids": params["ids"]})
                rows = db.execute(connection, "requeue_dead_letters", params)
                return [(row["id"], row["run_after"]) for row in rows]
        except IntegrityError as error:
            diag = getattr(error.__cause__, "diag", None)
            if last_try or getattr(diag, "constraint_name", None) not in REQUEUE_KEY_INDEXES:
                raise
    raise AssertionError("unreachable")


def delete_dead_letters(connection: Connection, ids: Sequence[int]) -> list[int]:
    return db.ids_of(db.execute(connection, "delete_dead_letters", {"ids": list(ids)}))


def run_jobs_now(connection: Connection, ids: Sequence[int]) -> list[int]:
    """Make waiting jobs due now and wake the workers of their queues; running jobs are left
    alone."""
    return db.ids_of(db.execute(connection, "run_jobs_now", {"ids": list(ids)}))


def cancel_jobs(
    connection: Connection, ids: Sequence[int], *, requested_by: str = "an operator"
) -> list[int]:
    """Delete waiting jobs; running jobs are left alone. A waiting step of a workflow is kept
    as ``cancelled`` and ends its workflow (aborted: "cancelled by ``requested_by``")."""
    params = {"ids": list(ids), "reason": f"cancelled by {requested_by}"}
    return db.ids_of(db.execute(connection, "cancel_jobs", params))


#: Runs of ``abort_jobs`` at most: a job claimed or retried while the statement ran is caught by
#: the next run (it is running or waiting then); a third change within milliseconds is not.
ABORT_RUNS = 3


def abort_jobs(
    connection: Connection, ids: Sequence[int], *, requested_by: str, cancel_waiting: bool = True
) -> tuple[list[int], list[int]]:
    """Request the abort of the running jobs among ``ids`` and (``cancel_waiting``) cancel the
    waiting ones (as ``cancel_jobs``); returns ``(abort requested ids, cancelled ids)``. Ids of
    jobs that no longer exist (or finished, kept as successful) are in neither."""
    requested: list[int] = []
    cancelled: list[int] = []
    left = list(dict.fromkeys(ids))
    params = {"requested_by": requested_by, "cancel_waiting": cancel_waiting}
    params["reason"] = f"aborted at the request of {requested_by}"  # of a workflow's step
    for _ in range(ABORT_RUNS):
        if not left:
            break
        row = db.execute(connection, "abort_jobs", {**params, "ids": left})[0]
        requested += row["requested"]
        cancelled += row["cancelled"]
        done = set(row["requested"]) | set(row["cancelled"])
        # what the statement's snapshot showed as running (or waiting) but its row lock did not
        left = [job_id for job_id in row["eligible"] if job_id not in done]
    return requested, cancelled


def request_abort(connection: Connection, ids: Sequence[int], *, requested_by: str) -> list[int]:
    """Request the abort of the running jobs among ``ids`` (waiting ones are left alone);
    returns their ids."""
    return abort_jobs(connection, ids, requested_by=requested_by, cancel_waiting=False)[0]


# -- statistics (worker -> dashboard) -----------------------------------------------------------


def record_queue_stats(connection: Connection, counts: dict[str, Any]) -> None:
    """Add per-queue counts to the current minute of ``pgjobs_stat`` in one upsert.

    ``counts`` maps a queue name to an object with ``succeeded``, ``retried``, ``dead_lettered`` and
    ``wait_buckets`` (see ``metrics.QueueMetrics``).
    """
    if not counts:
        return
    queues = sorted(counts)  # one lock order for every worker
    db.execute(
        connection,
        "record_queue_stats",
        {
            "queues": queues,
            "succeeded": [counts[q].succeeded for q in queues],
            "retried": [counts[q].retried for q in queues],
            "dead_lettered": [counts[q].dead_lettered for q in queues],
            "waits": ["{" + ",".join(map(str, counts[q].wait_buckets)) + "}" for q in queues],
        },
    )


def prune_queue_stats(connection: Connection, keep_seconds: float) -> None:
    db.execute(connection, "prune_queue_stats", {"keep_seconds": keep_seconds})


# The worker registry's rows and its workers' server processes: their own module, these names
# kept here (every caller goes through ``operations``).
from .worker_rows import (  # noqa: E402, F401
    cancel_backends,
    register_worker,
    terminate_backends,
    touch_worker,
    unregister_worker,
)
