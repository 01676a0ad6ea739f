"""What a claim returns (``ClaimedJob``), how a worker plans one (``ClaimPlan``) and how it
builds one (``ClaimBuilder`` -> ``Claim``).

They live in ``operations`` for their users: ``from django_pgjobs.operations import
ClaimedJob``. The claim itself runs through ``operations.complete(..., claim=...)``, alone or
carrying acknowledgements; why it is made as it is: ``docs/explanation/claim.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
from django.utils.timezone import make_naive

from .errors import Aborted


@dataclass
class ClaimedJob:
    """A job a worker holds, as the claim returned it."""

    id: int
    name: str
    queue: str
    priority: int
    args: Any
    kwargs: Any
    attempts: int
    max_attempts: int
    run_after: datetime
    created_at: datetime
    claim_token: uuid.UUID
    timeout: float | None = None  # the row's; the worker puts the effective one here
    lease_seconds: float = 0.0
    keep_result: bool = False
    deadline: float | None = None  # monotonic time its timeout ends (set when it starts)
    #: Set (by the worker's dispatcher) once an abort of this job was requested: a handler that
    #: polls it can stop, best by raising ``django_pgjobs.Aborted`` (``raise_if_aborted()``).
    abort_requested: bool = False
    task_backend: str = ""  # the django.tasks backend alias of a task row; "" for a native job
    version: int = 1  # of the payload it was enqueued with (``versions``)
    #: Claimed to wait for a slot: numbered (``attempts``) but its start recorded in the row only
    #: once an executor takes it (``mark_started``); given back its attempt if it never starts.
    held: bool = False
    #: Held, and once given back by the rescue unstarted (``returned_unstarted``): its executor
    #: records its start before running it (a job that killed its worker unrecorded once spends
    #: its attempts from then on), instead of the dispatcher recording it after.
    start_recorded_first: bool = False
    #: The trace context ``enqueue()`` stored (``tracing``): a carrier as JSON, or None.
    trace_context: Any = None
    #: The span of this attempt while it runs, when OpenTelemetry is installed (``tracing``).
    span: Any = None
    #: What ``set_progress`` keeps between its writes (``progress.py``).
    pending_progress: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    progress_written_at: float = field(default=float("-inf"), repr=False, compare=False)
    #: The workflow this job is a step of (None: none); its acknowledgement then counts it
    #: (``operations.complete``).
    workflow_id: int | None = None
    #: The alias of the database it was claimed from (its queue's, ``routing``); "" unknown.
    database: str = ""

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts >= self.max_attempts

    def raise_if_aborted(self) -> None:
        """Raise ``django_pgjobs.Aborted`` if an abort of this job was requested."""
        if self.abort_requested:
            raise Aborted(f"job #{self.id} stopped: its abort was requested")

    def set_progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Report ``done`` of ``total`` (numbers >= 0) and a ``note``, shown in the admin and
        by ``get_result()``; written at most once a second, so call it as often as you like
        (``progress.py``). In an ``async def`` job: ``await aset_progress(...)``."""
        from . import progress

        progress.report(self, done, total, note)

    def set_metadata(self, **values: Any) -> None:
        """Merge these JSON values into the job's metadata (written at once)."""
        from . import progress

        progress.set_metadata(self, values)

    async def aset_progress(self, done: float, total: float | None = None, note: str = "") -> None:
        from asgiref.sync import sync_to_async

        await sync_to_async(self.set_progress)(done, total, note)

    async def aset_metadata(self, **values: Any) -> None:
        from asgiref.sync import sync_to_async

        await sync_to_async(self.set_metadata)(**values)


@dataclass(frozen=True)
class ClaimPlan:
    """How many jobs of each kind one claim takes (``room``) and how many of those start at once
    (``starts``: the free slots; the claim records their start, the rest are held).
    ``async_names``: the names of the ``async def`` jobs; every other name is a sync job."""

    limit: int  # jobs in all
    sync_room: int
    sync_starts: int
    async_room: int = 0
    async_starts: int = 0
    async_names: Sequence[str] = ()

    @classmethod
    def all_start(cls, limit: int) -> ClaimPlan:
        """Up to ``limit`` jobs of any kind, every one started at once."""
        return cls(limit=limit, sync_room=limit, sync_starts=limit)

    def params(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "sync_room": self.sync_room,
            "sync_starts": min(self.sync_starts, self.sync_room),
            "async_room": self.async_room,
            "async_starts": min(self.async_starts, self.async_room),
            "async_names": list(self.async_names),
        }


@dataclass(frozen=True)
class Claim:
    """One claim, ready to run: the parameters of the claim statement (``claim_jobs``, every
    statement that carries it takes the same) and what its rows are read with. Its token is
    this claim's: run it once, through ``operations.complete(..., claim=...)``."""

    params: dict[str, Any]
    lease_seconds: float  # the lease the claim gives, recorded on each ``ClaimedJob``
    prepared: bool  # run prepared, when it runs alone (``db.execute_prepared_replanned``)
    #: ``settings.USE_TZ`` when the claim was built: its rows' times aware (UTC) or naive in
    #: the project's time zone, as Django reads a ``DateTimeField`` (read once per claim, not
    #: twice per job: the lazy settings object costs 0.2 µs a read).
    use_tz: bool = True

    @property
    def token(self) -> uuid.UUID:
        return self.params["token"]

    def job(self, row: dict[str, Any], alias: str) -> ClaimedJob:
        """A row of the claim statements (times as epoch seconds, no token) as a
        ``ClaimedJob`` of this claim, on the database ``alias``."""
        run_after = datetime.fromtimestamp(row["run_after"], timezone.utc)
        created_at = datetime.fromtimestamp(row["created_at"], timezone.utc)
        if not self.use_tz:
            run_after, created_at = make_naive(run_after), make_naive(created_at)
        row["run_after"], row["created_at"] = run_after, created_at
        return ClaimedJob(
            **row,
            claim_token=self.params["token"],
            lease_seconds=self.lease_seconds,
            database=alias,
        )


class ClaimBuilder:
    """Builds a worker's claims. What all of them share (the worker's id, its queues, the lease,
    whether the session may run prepared statements) is made into statement parameters once;
    each claim adds its plan, the names it skips and a fresh token.

    ``queues``: None for every queue. ``only_ids``: None for any job; else only these jobs are
    claimed (an immediate-mode run: the jobs its caller enqueued). ``prepared``: only on a session that keeps its settings
    from one statement to the next (a worker that may LISTEN has one), see
    ``db.execute_prepared_replanned``.
    """

    def __init__(
        self,
        *,
        worker: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        prepared: bool = False,
        only_ids: Sequence[int] | None = None,
    ) -> None:
        self.lease_seconds = float(lease_seconds)
        self.prepared = prepared
        self.shared: dict[str, Any] = {
            "worker": worker,
            "all_queues": queues is None,
            "queues": list(queues or []),
            "lease_seconds": self.lease_seconds,
            "any_id": only_ids is None,
            "only_ids": list(only_ids or []),
        }

    def claim(self, plan: ClaimPlan, skip_names: Sequence[str] | None = None) -> Claim:
        """The claim of ``plan``, skipping jobs named in ``skip_names`` (names of a kind whose
        slots are full)."""
        params = {
            **self.shared,
            **plan.params(),
            "any_name": not skip_names,
            "skip_names": list(skip_names or []),
            "token": uuid.uuid4(),
        }
        return Claim(params, self.lease_seconds, self.prepared, settings.USE_TZ)

    def take(self, limit: int) -> Claim:
        """A claim of up to ``limit`` jobs of any kind, every one started at once."""
        return self.claim(ClaimPlan.all_start(limit))
