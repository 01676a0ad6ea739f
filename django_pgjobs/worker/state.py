"""The dispatcher's own state: the jobs it holds, its counts, and the thread that owns them.

One object, handed to the parts that need it (acknowledgements, failure policy, slots, starts,
timeouts, shutdown), so that none of them needs the ``Worker``. Dispatcher thread only
(``owner.check()``).
"""

from __future__ import annotations

from .. import metrics
from ..claims import ClaimedJob
from .outcomes import Stats
from .ownership import ThreadOwner


class DispatcherState:
    def __init__(self) -> None:
        self.held: dict[int, ClaimedJob] = {}  # claimed and not finished (queued or running)
        self.async_held: set[int] = set()  # ids of the held async jobs handed to the loop
        self.stats = Stats()
        self.metrics = metrics.QueueMetrics()  # per-queue counts for the admin dashboard
        self.owner = ThreadOwner("dispatcher")

    def hold(self, job: ClaimedJob) -> None:
        """A claim returned ``job``."""
        self.held[job.id] = job

    def holds(self, job: ClaimedJob) -> bool:
        """This claim of ``job`` is still held (not finished, not claimed again meanwhile)."""
        return self.held.get(job.id) is job

    def running_async(self, job: ClaimedJob) -> None:
        """``job`` was handed to the event loop: it takes an async slot until it finishes."""
        self.async_held.add(job.id)

    def slot_freed(self, job: ClaimedJob) -> None:
        """``job`` succeeded and waits for its acknowledgement: its async slot is free."""
        self.async_held.discard(job.id)

    def finished(self, job: ClaimedJob) -> None:
        """``job``'s attempt has ended: stop holding it, count it."""
        self.forget(job)
        self.stats.window_finished += 1

    def forget(self, job: ClaimedJob) -> None:
        """Stop tracking this claim of ``job``. Held jobs are keyed by id, and a job whose lease
        expired can be claimed again by this same worker while the old run is still going: the
        old run finishing must not drop the new claim (it would lose its heartbeat)."""
        if self.held.get(job.id) is job:
            del self.held[job.id]
            self.async_held.discard(job.id)
        # its attempt has ended: the statement ending it records its start (starts.py)
        job.held = False
