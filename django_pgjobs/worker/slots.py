"""The worker's two kinds of execution slots: ``concurrency`` executor threads for plain
``def`` jobs and ``async_concurrency`` tasks on the event loop for ``async def`` jobs.

The dispatcher claims for the free slots of both kinds in one statement, each kind capped at its
own room (sync: free executors plus the prefetch; async: free async slots), so sync jobs never
fill the async slots (nor the reverse); when one kind is full, the claim skips that kind's job
names, so neither kind starves the other behind the head of a queue. Only the jobs free slots
start at once have their attempt counted by the claim; the prefetched rest are held
(``starts.py``). A worker whose registry has no async job has no async slots: its claims are
exactly those of a sync-only worker.
Dispatcher thread only.
"""

from __future__ import annotations

import time

from .. import registry
from ..operations import ClaimedJob, ClaimPlan
from .acks import Acknowledgements
from .holding import Prefetch
from .state import DispatcherState


class Slots:
    def __init__(
        self,
        state: DispatcherState,
        acks: Acknowledgements,
        prefetch: Prefetch,
        *,
        concurrency: int,
        async_concurrency: int,
        poll_interval: float,
    ) -> None:
        self.state = state  # its held jobs (async_held: those on the loop) fill the slots
        self.acks = acks  # a finished job waiting for its acknowledgement frees its slot
        self.prefetch = prefetch
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.poll_interval = poll_interval  # at most one async probe per poll interval
        self.sync_names: list[str] = []
        self.async_names: list[str] = []
        self.async_set: frozenset[str] = frozenset()
        self.async_more = False  # the last claim filled the async room: more may be ready
        self.sync_filled = False  # it filled the sync room and left async slots free
        self.next_async_probe = 0.0  # monotonic time a probe for async jobs may run again
        self.enabled = False  # any async job registered
        self.last_skip: list[str] | None = None  # the names the last claim left alone

    def load_names(self) -> None:
        """(At start, after the job modules are imported.)"""
        definitions = registry.registered().values()
        self.async_names = sorted(d.name for d in definitions if d.is_async)
        self.async_set = frozenset(self.async_names)
        self.sync_names = sorted(d.name for d in definitions if not d.is_async)
        self.enabled = bool(self.async_names)

    def rooms(self) -> tuple[int, int]:
        """Jobs to claim now: (sync room, async room)."""
        held_async = len(self.state.async_held)
        # finished jobs waiting for their acknowledgement free their slot: the acknowledgement
        # travels with the next claim
        sync_room = self.concurrency + self.prefetch.current() - len(self.state.held) + held_async
        sync_room += len(self.acks)
        if not self.enabled:
            return max(sync_room, 0), 0
        return max(sync_room, 0), max(self.async_concurrency - held_async, 0)

    def free_executors(self) -> int:
        """Executors free for a job claimed now: those neither running a job nor about to take
        one already handed over (a finished job waiting for its acknowledgement is done)."""
        state = self.state
        unfinished_sync = len(state.held) - len(state.async_held) - len(self.acks)
        return max(self.concurrency - unfinished_sync, 0)

    def plan(self, limit: int) -> ClaimPlan:
        """(Before a claim of at most ``limit`` jobs.) Each kind's room, and how many of each
        start at once: every async job claimed (async jobs are never held), the sync ones up to
        the free executors."""
        sync_room, async_room = self.rooms()
        if sync_room == 0 and async_room:  # a claim for async jobs alone: see async_wanted()
            self.next_async_probe = time.monotonic() + self.poll_interval
        return ClaimPlan(
            limit=limit,
            sync_room=min(sync_room, limit),
            sync_starts=self.free_executors(),
            async_room=min(async_room, limit),
            async_starts=async_room,
            async_names=self.async_names,
        )

    def filled_a_room(self, plan: ClaimPlan, jobs: list[ClaimedJob]) -> bool:
        """The claim took as many jobs of a kind as that kind had room for: more may be ready
        (``async_more`` says whether that kind is async)."""
        claimed_async = sum(1 for job in jobs if job.name in self.async_set)
        claimed_sync = len(jobs) - claimed_async
        self.async_more = 0 < plan.async_room <= claimed_async
        self.sync_filled = 0 < plan.sync_room <= claimed_sync and claimed_async < plan.async_room
        return self.async_more or self.sync_filled

    def async_wanted(self, fresh: bool) -> bool:
        """Async slots are free and async jobs may be ready: woken or poll due (``fresh``), the
        last claim filled the async room, or a probe is due. A claim that filled the sync room
        may have seen only sync jobs in its window, with async ones behind them: once the sync
        room is full (the next claim skips sync names) look for them, at most once per poll
        interval (such a claim walks past every ready sync job)."""
        if fresh or self.async_more:
            return True
        sync_room, _ = self.rooms()
        return self.sync_filled and sync_room == 0 and time.monotonic() >= self.next_async_probe

    def skip_names(self, sync_room: int, async_room: int) -> list[str] | None:
        """The names the next claim leaves alone: those of a kind whose slots are full."""
        if not self.enabled:
            return None
        if sync_room == 0:
            return self.sync_names
        if async_room == 0:
            return self.async_names
        return None

    def claim_skips(self) -> list[str] | None:
        """(Before a claim.) The names it leaves alone, remembered for ``kind_freed()``."""
        self.last_skip = self.skip_names(*self.rooms())
        return self.last_skip

    def kind_freed(self) -> bool:
        """The last claim left a kind alone (its jobs may be ready) and that kind has room now:
        claim again without waiting for the poll."""
        if self.last_skip is None:
            return False
        return self.skip_names(*self.rooms()) is not self.last_skip

    def beyond_free(self, runnable: list, free_sync: int) -> dict[int, ClaimedJob]:
        """Adaptive prefetch: a long (or not yet seen) job is kept only for a free slot of its
        kind; the ones beyond are to go back at once for another worker to start."""
        adaptive = self.prefetch.adaptive
        if adaptive is None:
            return {}
        free_async = self.async_concurrency - len(self.state.async_held)
        surplus = {}
        for job, definition in runnable:
            if definition.is_async:
                if adaptive.is_long(job.name) and free_async <= 0:
                    surplus[job.id] = job
                else:
                    free_async -= 1
                continue
            adaptive.claimed(job.name)  # the sync mix decides the prefetch
            if adaptive.is_long(job.name) and free_sync <= 0:
                surplus[job.id] = job
            else:
                free_sync -= 1
        return surplus
