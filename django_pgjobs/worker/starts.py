"""The starts of held jobs, recorded in their rows by the dispatcher.

A job the claim holds for a busy worker has its attempt numbered but its start not recorded
(``started_at`` empty): the rescue gives a worker's held jobs back with their attempt (invariant
15). When an executor takes such a job it notes the start here (``started``, any thread) and
runs it at once; the dispatcher records the starts (``mark_started``)
``MARK_DELAY_SECONDS`` later, in one statement for every start of that span, for the jobs still
running then. A job that finished before has its start set by the statement that ends its attempt
(acknowledgement, retry, dead letter): short jobs, the ones worth holding, cost no statement of
their own, and the executor never waits for one.

A worker killed within that span leaves a started job unrecorded: the rescue gives it back with
its attempt given back but marked ``returned_unstarted``; such a job, held again, has its start
recorded by its executor before it runs (``executors.py``): a job that kills its worker as it
starts spends its attempts all the same. See ``docs/explanation/claim.md``.
"""

from __future__ import annotations

import time
from collections import deque

from .. import operations
from ..operations import ClaimedJob
from .faults import DispatcherDatabase
from .outcomes import WAKE, Inbox
from .state import DispatcherState

MARK_DELAY_SECONDS = 0.05


class PendingStarts:
    def __init__(self, db: DispatcherDatabase, state: DispatcherState, inbox: Inbox) -> None:
        self.db = db
        self.state = state
        self.inbox = inbox
        self.incoming: deque[tuple[ClaimedJob, float]] = deque()  # executors append
        # (dispatcher) job id -> (job, monotonic time it started), oldest first
        self.pending: dict[int, tuple[ClaimedJob, float]] = {}
        self.wake_me = False  # the dispatcher blocks for longer than MARK_DELAY_SECONDS

    def started(self, job: ClaimedJob, at: float) -> None:
        """(Executor.) Held ``job`` started at ``at``. The dispatcher collects starts at each
        turn; one about to block for longer than ``MARK_DELAY_SECONDS`` is woken, once (it sets
        ``wake_me`` before it looks at ``incoming`` for the last time: no start is missed)."""
        self.incoming.append((job, at))
        if self.wake_me:
            self.wake_me = False
            self.inbox.put(WAKE)

    def before_blocking(self, seconds: float) -> float:
        """(Dispatcher, about to wait ``seconds`` for events.) How long to wait: not at all when
        a start is waiting to be collected."""
        self.wake_me = seconds > MARK_DELAY_SECONDS
        return 0.0 if self.incoming else seconds

    @staticmethod
    def finished(job: ClaimedJob) -> None:
        """(Dispatcher.) ``job``'s attempt ended: the statement ending it records its start."""
        job.held = False

    def _collect(self) -> None:
        while self.incoming:
            job, at = self.incoming.popleft()
            if job.held and self.state.holds(job):
                self.pending[job.id] = (job, at)

    def deadline(self) -> float | None:
        """When the oldest start waiting to be recorded is due, if any waits."""
        self._collect()
        if not self.pending:
            return None
        _, oldest = next(iter(self.pending.values()))
        return oldest + MARK_DELAY_SECONDS

    def due(self) -> bool:
        deadline = self.deadline()
        return deadline is not None and time.monotonic() >= deadline

    def flush(self) -> None:
        """Record the pending starts of jobs still running, in one statement (a failure keeps
        them pending)."""
        now = time.monotonic()
        started = [
            (job, now - at)
            for job, at in self.pending.values()
            if job.held and self.state.holds(job)
        ]
        operations.mark_started(self.db.connection(), started)
        for job, _ in started:
            job.held = False  # recorded, or no longer this worker's
        self.pending.clear()
