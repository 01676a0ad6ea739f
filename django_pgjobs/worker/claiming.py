"""The claim: when to claim, for how many jobs, and what becomes of the jobs a claim returns.

A claim is due when jobs may be ready (the last claim was full, a notification woke the worker,
or the poll is due) and it is worth a statement (``due()``). It asks for the free slots of both
kinds (``Slots.plan``), skips the names of a kind whose slots are full, carries the pending
acknowledgements, and holds what it returns: each job is admitted (``admission.py``) or
dead-lettered, long jobs beyond the free slots go back at once (adaptive prefetch), jobs that
declare their own lease get it, and the rest go to the executors. Dispatcher thread only.
"""

from __future__ import annotations

import time

from .. import operations, registry
from ..claims import ClaimedJob, ClaimPlan
from .acks import Acknowledgements
from .admission import Refusal, admit
from .executors import ExecutorPool
from .failures import FailurePolicy
from .faults import DispatcherDatabase
from .options import WorkerOptions
from .outcomes import Inbox
from .slots import Slots
from .state import DispatcherState
from .stopping import StopState

# A worker woken by a notification claims again this soon after, for the jobs whose producers
# skipped their notification (wakeups.NOTIFY_COALESCE_SECONDS).
ECHO_POLL_SECONDS = 0.02
# A name this worker handed back as unknown (a newer release enqueued it) is left out of its
# claims this long: a worker that knows it takes the job when it is due again, instead of this
# one, whose polls line up with the hand-back's delay, claiming it first every time. After it,
# this worker claims such a job again: to hand it back again, or to dead-letter it once
# UNKNOWN_JOB_GRACE_SECONDS have passed.
UNKNOWN_SKIP_SECONDS = 30.0
UNKNOWN_SKIP_MAX = 100  # most names skipped so (forged rows may name anything)

Runnable = list[tuple[ClaimedJob, registry.JobDefinition]]


class Claimer:
    def __init__(
        self,
        *,
        db: DispatcherDatabase,
        state: DispatcherState,
        stop: StopState,
        inbox: Inbox,
        slots: Slots,
        acks: Acknowledgements,
        executors: ExecutorPool,
        failures: FailurePolicy,
        options: WorkerOptions,
        worker_id: str,
    ) -> None:
        self.db = db
        self.state = state
        self.stop = stop
        self.inbox = inbox
        self.slots = slots
        self.acks = acks
        self.executors = executors
        self.failures = failures
        self.options = options
        self.worker_id = worker_id
        # what every claim of this worker shares, built once; prepared on a session that keeps
        # its settings: one that may LISTEN does
        self.claims = operations.ClaimBuilder(
            worker=worker_id,
            queues=options.queues,
            lease_seconds=options.lease_seconds,
            prepared=options.listen,
            only_ids=options.only_ids,
        )
        self.more_ready = True  # the last claim was full: more jobs may be ready
        self.finished_at_claim = 0  # jobs finished (stats.finished) when the last claim went
        self.unknown_until: dict[str, float] = {}  # name handed back unknown -> skipped until
        self.next_poll = time.monotonic()  # when to look for ready jobs unprompted
        # the flow claim (jobs with a flow key: claim_jobs_flow): when it is due unprompted,
        # and the jobs it took that this worker still holds (one finishing frees a key's slot)
        self.flow_at = time.monotonic()
        self.flow_held: set[int] = set()
        self.flow_soon = False  # the last flow claim took jobs or saw a key due within a poll

    def capacity(self) -> int:
        """Jobs the next claim may take: the free slots of both kinds, within ``max_jobs``."""
        sync_room, async_room = self.slots.rooms()
        room = sync_room + async_room
        if self.options.max_jobs is not None:
            room = min(room, self.options.max_jobs - self.state.stats.claimed)
        return max(room, 0)

    def limit_reached(self) -> bool:
        """``max_jobs`` jobs have been claimed."""
        max_jobs = self.options.max_jobs
        return max_jobs is not None and self.state.stats.claimed >= max_jobs

    def due(self) -> bool:
        """Claim now: the plain claim (``plain_due``) or the flow claim (``flow_due``) is due."""
        if self.stop.requested.is_set() or self.capacity() == 0:
            return False
        return self.flow_due() or self.plain_due()

    def next_look(self) -> float:
        """When to claim unprompted: the poll, or the flow claim's next look."""
        return min(self.next_poll, self.flow_at)

    def plain_due(self) -> bool:
        """The plain claim is due: jobs may be ready (last claim full, woken, or poll due) and
        it is worth a statement: for sync jobs, an executor may soon be idle (fewer jobs waiting
        locally than executors), half their room is free, or acknowledgements are due; for
        async jobs, a slot is free and async jobs may be ready (``Slots.async_wanted``).
        Without prefetch every free sync slot is an idle executor."""
        if self.stop.requested.is_set() or self.capacity() == 0:
            return False
        fresh = self.inbox.woken() or time.monotonic() >= self.next_poll or self.slots.kind_freed()
        if not (self.more_ready or fresh):
            return False
        sync_room, async_room = self.slots.rooms()
        if async_room and self.slots.async_wanted(fresh):
            return True
        concurrency = self.options.concurrency
        return sync_room > 0 and (
            self.executors.waiting() < concurrency
            or sync_room * 2
            >= min(self.options.batch_size, concurrency + self.slots.prefetch.current())
            or self.acks.due()  # a statement goes anyway: let it claim too
        )

    def claim(self) -> None:
        """Claim for the free slots: the flow claim first when due, then the plain claim
        (carrying the pending acknowledgements) when due; dispatch what they return."""
        plain = self.plain_due()
        if self.flow_due():
            self.claim_flow()
        if plain and self.capacity() > 0:
            self.claim_plain()

    def claim_plain(self) -> None:
        """The plain claim, carrying the pending acknowledgements; then when to look again."""
        woken = self.inbox.take_wake()
        self.finished_at_claim = self.state.stats.finished
        self.more_ready = self._claim_and_dispatch()
        poll = self.options.poll_interval
        # after a wake, look again soon: producers skip notifications sent less than
        # NOTIFY_COALESCE_SECONDS apart (wakeups.py)
        self.next_poll = time.monotonic() + (min(ECHO_POLL_SECONDS, poll) if woken else poll)

    def _claim_and_dispatch(self) -> bool:
        """True when the claim was full (more may be ready)."""
        self.acks.flush_results()  # only jobs that keep their result: the claim carries the others
        limit = min(self.capacity(), self.options.batch_size)
        plan = self.slots.plan(limit)
        jobs = self._claim(plan)
        full = self.slots.filled_a_room(plan, jobs) or len(jobs) == limit
        return self._dispatch(jobs) or full

    def _dispatch(self, jobs: list[ClaimedJob]) -> bool:
        """Hold, admit and start what a claim returned; True when some went back at once."""
        state = self.state
        free_sync = self.options.concurrency - len(state.held) + len(state.async_held)
        runnable, returned = self._admit(jobs)
        surplus = self.slots.beyond_free(runnable, free_sync)
        # jobs that went back do not count: neither claimed (max_jobs) nor waited for (metrics)
        back = set(surplus) | {job.id for job in returned}
        counted = [job for job in jobs if job.id not in back]
        state.stats.claimed += len(counted)
        state.metrics.claimed(counted)
        self._start(
            [pair for pair in runnable if pair[0].id not in surplus], list(surplus.values())
        )
        # jobs handed back are ready again: a burst worker must not take this claim as the end
        return bool(surplus)

    # -- the flow claim (jobs with a flow key; docs/explanation/flow-control.md) ---------------

    def flow_due(self) -> bool:
        """The flow claim is due: an executor or async slot is free, and keyed jobs may be
        claimable: its look is due (its last claim took jobs, a key it saw is due again, or the
        poll), a job with a flow key was enqueued (``Inbox.wake_flow``), or a job it took has
        finished (its key's slot is free once acknowledged)."""
        if self.stop.requested.is_set() or not self._flow_room():
            return False
        if self.inbox.take_flow_wake():
            self.flow_at = time.monotonic()
        if time.monotonic() >= self.flow_at:
            return True
        held = self.state.held
        return any(job_id not in held for job_id in self.flow_held) or any(
            job.id in self.flow_held for job in self.acks.pending
        )

    def _flow_room(self) -> int:
        _, async_room = self.slots.rooms()
        return min(self.capacity(), self.slots.free_executors() + async_room)

    def claim_flow(self) -> None:
        """Claim jobs with a flow key for the free executors and async slots (never held: a
        held job would keep its key's slot from another worker's idle executor), after sending
        the finished ones' acknowledgements (a finished job holds its key's slot until then)."""
        if self.acks.pending:
            self.acks.flush()
        self.flow_held &= self.state.held.keys()
        room = self._flow_room()
        now = time.monotonic()
        if room <= 0:
            self.flow_at = now + self.options.poll_interval
            self.flow_soon = False
            return
        # a backlog of plain jobs (the last plain claim was full) keeps half the room
        limit = min(room if not self.more_ready else max(1, room // 2), self.options.batch_size)
        free_sync = self.slots.free_executors()
        _, async_room = self.slots.rooms()
        plan = ClaimPlan(
            limit=limit,
            sync_room=min(free_sync, limit),
            sync_starts=free_sync,
            async_room=min(async_room, limit),
            async_starts=async_room,
            async_names=self.slots.async_names,
        )
        claim = self.claims.claim(plan, self._skips())
        jobs, wait = operations.claim_jobs_flow(self.db.connection(), claim, lanes=limit * 2 + 8)
        self.flow_held.update(job.id for job in jobs)
        self._dispatch(jobs)
        poll = self.options.poll_interval
        # jobs taken: more may be claimable at once; else when a key it saw is due again
        self.flow_at = now if jobs else now + (poll if wait is None else min(wait, poll))
        # a burst worker waits for keys due within a poll (a rate limit's next token)
        self.flow_soon = bool(jobs) or (wait is not None and wait <= poll)

    def _claim(self, plan: ClaimPlan) -> list[ClaimedJob]:
        """The claim statement, which carries the pending acknowledgements."""
        acks = self.acks.pending
        claim = self.claims.claim(plan, self._skips())
        done, jobs = operations.complete(self.db.connection(), acks, claim=claim)
        self.acks.sent(acks, done)
        return jobs

    def _skips(self) -> list[str] | None:
        """The names the claim leaves alone: a full kind's (``Slots``), and those this worker
        handed back unknown within ``UNKNOWN_SKIP_SECONDS``."""
        skips = self.slots.claim_skips()
        if not self.unknown_until:
            return skips
        now = time.monotonic()
        self.unknown_until = {n: t for n, t in self.unknown_until.items() if t > now}
        return [*(skips or ()), *self.unknown_until] or None

    def _skip_unknown(self, returned: list[ClaimedJob]) -> None:
        until = time.monotonic() + UNKNOWN_SKIP_SECONDS
        for job in returned:
            self.unknown_until.pop(job.name, None)  # newest last: the oldest go first
            self.unknown_until[job.name] = until
        while len(self.unknown_until) > UNKNOWN_SKIP_MAX:
            del self.unknown_until[next(iter(self.unknown_until))]

    def _admit(self, jobs: list[ClaimedJob]) -> tuple[Runnable, list[ClaimedJob]]:
        """Hold the claimed jobs; those this worker cannot run go to the failure policy. The
        runnable ones come back with their definitions, those whose attempt the claim counted
        first (the free executors take them at once), and the jobs handed back unknown."""
        runnable, refused = [], []
        for job in jobs:
            self.state.hold(job)
            admitted = admit(job)
            if isinstance(admitted, Refusal):
                refused.append((job, admitted))
            else:
                runnable.append((job, admitted))
        runnable.sort(key=lambda pair: pair[0].held)
        returned = self.failures.refuse_all(refused) if refused else []
        self._skip_unknown(returned)
        return runnable, returned

    def _start(self, runnable: Runnable, surplus: list[ClaimedJob]) -> None:
        try:
            if surplus:
                self.hand_back(surplus)
            # The claim gave every job the worker's lease; jobs that declare their own get it
            # before they start, in one statement for the batch (none when all use the default).
            lease = self.options.lease_seconds
            own_lease = [job for job, _ in runnable if job.lease_seconds != lease]
            if own_lease:
                operations.extend_leases(self.db.connection(), own_lease)
        finally:
            # The claim has committed: whatever happened to the hand-back or the extension (a
            # lost connection goes on to the main loop's reconnect), the jobs held run, on the
            # worker's lease until the next heartbeat gives them their own.
            for job, definition in runnable:
                if definition.is_async:
                    self.state.running_async(job)
                self.executors.submit(job, definition)

    def hand_back(self, jobs: list[ClaimedJob]) -> None:
        """Give claimed jobs back, attempt not spent (one statement)."""
        released = operations.release_jobs(self.db.connection(), jobs)
        for job in jobs:
            self.state.forget(job)
        self.state.stats.released += len(released)
