"""What a claim returns (``ClaimedJob``) and how a worker plans one (``ClaimPlan``).

Both live in ``operations`` for their users: ``from django_pgjobs.operations import
ClaimedJob``. The claim itself: ``operations.complete_and_claim_jobs`` and
``docs/explanation/claim.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    #: Claimed to wait for a slot: numbered (``attempts``) but its start recorded in the row only
    #: once an executor takes it (``mark_started``); given back its attempt if it never starts.
    held: bool = False
    #: Held, and once given back by the rescue unstarted (``returned_unstarted``): its executor
    #: records its start before running it (a job that killed its worker unrecorded once spends
    #: its attempts from then on), instead of the dispatcher recording it after.
    start_recorded_first: bool = False

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts >= self.max_attempts

    def raise_if_aborted(self) -> None:
        """Raise ``django_pgjobs.Aborted`` if an abort of this job was requested."""
        if self.abort_requested:
            raise Aborted(f"job #{self.id} stopped: its abort was requested")


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
