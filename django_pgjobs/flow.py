"""Flow control at enqueue: which flow key a job waits on, and that key's limits.

A job gets a ``flow_key`` (and the claim leaves it to ``claim_jobs_flow``) when it has a
concurrency key or limit, a rate limit (its job's or its queue's) or a fairness key; the
others keep their plain enqueue and claim, unchanged. A job waits on one key:

- ``.using(concurrency_key="order:42")``: the key ``key:order:42``, shared by every job of any
  name given that key, limited to the job's ``concurrency_limit`` (1 when it gives none);
- ``@job(concurrency_limit=N)`` and/or ``@job(rate_limit="20/s")`` without a concurrency key:
  the key ``job:<name>``, all jobs of that name;
- ``.using(fairness_key="tenant:7")``: the key ``fair:tenant:7``, no limit, served in turn;
- a queue in ``PGJOBS["QUEUE_RATE_LIMITS"]``: the key ``queue:<queue>``.

Combinations that would need a job to wait on two keys are refused at enqueue with a clear
error (docs/howto/flow-control.md). Why keys and not locks: docs/explanation/flow-control.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import db
from .conf import get_config
from .validation import check_rate_limit

__all__ = [
    "FLOW_WAKE_PREFIX",
    "NO_FLOW",
    "flow_params",
    "prune_flow_keys",
    "remember_limits",
    "requeued_key_limits",
]

#: A key with no job ready nor running for this long (since it was last served or went idle) is
#: deleted (``prune_flow_keys``); its next job writes it again, with a full bucket.
FLOW_KEY_IDLE_SECONDS = 24 * 3600.0

#: The notification of a due job with a flow key says ``flow:<queue>`` (the plain one
#: ``<queue>``): the listener wakes the worker's flow claim too (worker/listener.py).
FLOW_WAKE_PREFIX = "flow:"

#: The flow parameters of a job without flow control (its statement takes none).
NO_FLOW: dict[str, Any] = {}

#: ``(concurrency_limit, rate_limit)`` of every registered job, by name, as the registry tells
#: them (``remember_limits``): the requeue of a dead letter whose key was pruned writes the key
#: again with them (``requeued_key_limits``). Kept here because the requeue runs in
#: ``operations``, which cannot import the registry (the registry imports it).
_JOB_LIMITS: dict[str, tuple[int | None, str | None]] = {}


def flow_params(definition: Any, options: Any, queue: str) -> dict[str, Any]:
    """The ``flow_key`` of a job enqueued with ``options`` into ``queue`` and its key's limits
    (``concurrency_limit``, ``rate`` per second, ``burst``); ``NO_FLOW`` without flow control.
    Raises ``ValueError`` for a job that would wait on two keys."""
    limit = getattr(definition, "concurrency_limit", None)
    rate_limit = getattr(definition, "rate_limit", None)
    concurrency_key = getattr(options, "concurrency_key", None)
    fairness_key = getattr(options, "fairness_key", None)
    queue_rate = get_config().QUEUE_RATE_LIMITS.get(queue)
    own = limit is not None or rate_limit is not None or concurrency_key or fairness_key
    if not own and queue_rate is None:
        return NO_FLOW
    name = definition.name
    if own and queue_rate is not None:
        raise ValueError(
            f"{name}: queue {queue!r} has a rate limit (PGJOBS['QUEUE_RATE_LIMITS']), so its "
            "jobs wait on the queue's key and take no concurrency_limit, rate_limit, "
            "concurrency_key or fairness_key of their own; enqueue it to another queue"
        )
    if fairness_key is not None:
        if limit is not None or rate_limit is not None or concurrency_key is not None:
            raise ValueError(
                f"{name}: a fairness_key applies to jobs without concurrency_limit, rate_limit "
                "or concurrency_key (a job waits on one key); give only one of them"
            )
        return _params("fair:" + fairness_key, None, None)
    if concurrency_key is not None:
        if rate_limit is not None:
            raise ValueError(
                f"{name}: a job with rate_limit (one bucket for all its calls) takes no "
                "concurrency_key (a job waits on one key); drop one of them"
            )
        return _params("key:" + concurrency_key, limit or 1, None)
    if queue_rate is not None:
        return _params("queue:" + queue, None, queue_rate)
    return _params("job:" + name, limit, rate_limit)


def _params(key: str, limit: int | None, rate_limit: str | None) -> dict[str, Any]:
    rate, burst = check_rate_limit(rate_limit) if rate_limit is not None else (None, None)
    return {"flow_key": key, "concurrency_limit": limit, "rate": rate, "burst": burst}


def remember_limits(definition: Any) -> None:
    """Keep the limits of a job the registry registers (``registry``): a requeue reads them."""
    _JOB_LIMITS[definition.name] = (definition.concurrency_limit, definition.rate_limit)


def requeued_key_limits(connection: Any, ids: Iterable[int]) -> dict[str, list[Any]]:
    """The limits a requeue of dead letters ``ids`` writes their flow keys with when the pruner
    deleted them meanwhile (the part ``requeue_flow_keys``): what an enqueue of their jobs would
    give each key now (a job no longer registered: one at a time), and of several jobs sharing a
    concurrency key, the smallest limit. As the statement takes them: parallel arrays
    ``flow_keys``, ``flow_limits``, ``flow_rates``, ``flow_bursts``."""
    limits: dict[str, dict[str, Any]] = {}
    for row in db.execute(connection, "dead_letter_flow_keys", {"ids": list(ids)}):
        these = _limits_of_key(row["flow_key"], row["name"])
        known = limits.setdefault(row["flow_key"], these)
        if None not in (known["concurrency_limit"], these["concurrency_limit"]):
            known["concurrency_limit"] = min(known["concurrency_limit"], these["concurrency_limit"])
    return {
        "flow_keys": list(limits),
        "flow_limits": [one["concurrency_limit"] for one in limits.values()],
        "flow_rates": [one["rate"] for one in limits.values()],
        "flow_bursts": [one["burst"] for one in limits.values()],
    }


def _limits_of_key(key: str, name: str) -> dict[str, Any]:
    kind, _, rest = key.partition(":")
    if kind == "fair":
        return _params(key, None, None)
    if kind == "queue":
        return _params(key, None, get_config().QUEUE_RATE_LIMITS.get(rest))
    if name not in _JOB_LIMITS:  # no such job any more: the worker dead-letters it when claimed
        return _params(key, 1, None)
    limit, rate_limit = _JOB_LIMITS[name]
    if kind == "job":
        return _params(key, limit, rate_limit)
    return _params(key, limit or 1, None)  # key:<concurrency key>


def prune_flow_keys(connection: Any, idle_seconds: float = FLOW_KEY_IDLE_SECONDS) -> int:
    """Delete the keys idle for ``idle_seconds`` (the worker's Pruner); how many."""
    return len(db.execute(connection, "prune_flow_keys", {"idle_seconds": idle_seconds}))
