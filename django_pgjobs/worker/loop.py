"""The dispatcher: the loop that claims, dispatches, and hears back from the executors.

Each turn: handle the events the executors and the listener sent; claim for the free slots
(carrying the pending acknowledgements) or send those alone; run the due maintenance units;
during a stop, hand back unstarted jobs and wait out the grace. Then sleep until the next event
or timer. A "not right now" database error ends the turn: the loop waits (``faults.py``) and the
next turn repeats what failed.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import socket
import threading
import time
import uuid
from collections.abc import Sequence

from django.db import DatabaseError

from .. import metrics, operations, registry, signals
from ..conf import get_config
from ..operations import ClaimedJob
from .aborts import AbortNotice, mark_aborted
from .acks import Acknowledgements
from .executors import ExecutorPool
from .failures import FailurePolicy
from .faults import DispatcherDatabase, LoopBackoff
from .holding import MAX_HELD, AdaptivePrefetch
from .listener import Listener
from .logs import log_start, log_stats
from .maintenance import units_for
from .outcomes import WAKE, Failed, HandBack, LostLease, Stats, Succeeded, one_line, send
from .ownership import ThreadOwner
from .shutdown import Shutdown
from .slots import Slots
from .starts import PendingStarts
from .stopping import SignalHandlers, StopState
from .timeouts import Timeouts

logger = logging.getLogger("django_pgjobs.worker")

# A worker woken by a notification claims again this soon after, for the jobs whose producers
# skipped their notification (enqueueing.NOTIFY_COALESCE_SECONDS).
ECHO_POLL_SECONDS = 0.02


class Worker:
    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        async_concurrency: int | None = None,
        batch_size: int | None = None,
        prefetch: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        poll_interval: float | None = None,
        shutdown_grace: float | None = None,
        listen: bool | None = None,
        stats_interval: float = 60.0,
        install_signal_handlers: bool = True,
    ) -> None:
        config = get_config()
        if queues is not None:
            queues = [registry.check_queue(q) for q in queues] or None
        for option, value, low in (
            ("concurrency", concurrency, 1),
            ("batch_size", batch_size, 1),
            ("prefetch", prefetch, 0),
        ):
            if value is None and option != "concurrency":
                continue  # chosen by the worker (holding.py)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{option} must be an int >= {low}, not {value!r}")
        if async_concurrency is None:
            async_concurrency = config.ASYNC_CONCURRENCY
        if (
            isinstance(async_concurrency, bool)
            or not isinstance(async_concurrency, int)
            or async_concurrency < 1
        ):
            raise ValueError(f"async_concurrency must be an int >= 1, not {async_concurrency!r}")
        if max_jobs is not None and (not isinstance(max_jobs, int) or max_jobs < 1):
            raise ValueError(f"max_jobs must be an int >= 1, not {max_jobs!r}")
        self.queues = queues
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.exit_code = 0  # 3: stopped because too many executor threads were stuck
        self.batch_size = MAX_HELD if batch_size is None else batch_size
        # None: adaptive, from the durations observed (holding.py); a number: fixed.
        self.adaptive = AdaptivePrefetch() if prefetch is None else None
        self.fixed_prefetch = prefetch
        self.burst = burst
        self.max_jobs = max_jobs
        self.poll_interval = (
            poll_interval if poll_interval is not None else config.POLL_INTERVAL_SECONDS
        )
        self.shutdown_grace = (
            shutdown_grace if shutdown_grace is not None else config.SHUTDOWN_GRACE_SECONDS
        )
        for option, value in (
            ("poll_interval", self.poll_interval),
            ("shutdown_grace", self.shutdown_grace),
        ):
            if (
                not isinstance(value, (int, float))
                or value < 0
                or (option == "poll_interval" and value == 0)
            ):
                raise ValueError(f"{option} must be a positive number of seconds, not {value!r}")
        self.listen = config.LISTEN_NOTIFY if listen is None else listen
        self.stats_interval = stats_interval
        self.install_signal_handlers = install_signal_handlers
        self.alias = config.DATABASE
        self.lease_seconds = config.LEASE_SECONDS
        self.heartbeat_seconds = config.HEARTBEAT_SECONDS
        self.rescue_interval = config.RESCUE_INTERVAL_SECONDS
        self.keep_succeeded = config.KEEP_SUCCEEDED_SECONDS
        self.keep_results = config.KEEP_RESULTS_SECONDS
        self.hostname = socket.gethostname()
        self.id = f"{self.hostname}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.sender = Worker  # of every django_pgjobs signal

        self.stats = Stats()
        self.metrics = metrics.QueueMetrics()  # per-queue counts for the admin dashboard
        # Thread ownership: see the package docstring (django_pgjobs/worker/__init__.py).
        self.owner = ThreadOwner("dispatcher")
        self.events: queue_module.Queue = queue_module.Queue()  # any thread -> dispatcher
        self.held: dict[int, ClaimedJob] = {}  # claimed and not finished (queued or running)
        self._wake_pending = threading.Event()
        self.stop = StopState(self.shutdown_grace)
        self.db = DispatcherDatabase(self.alias, self.stop)
        self.acks = Acknowledgements(self)
        self.starts = PendingStarts(self)
        self.failures = FailurePolicy(self)
        self.executors = ExecutorPool(self)
        self.slots = Slots(self, async_concurrency)
        self.timeouts = Timeouts(self)
        self.listener = Listener(self) if self.listen else None
        self.shutdown = Shutdown(self)
        self.signal_handlers = SignalHandlers(self)

    # -- public ---------------------------------------------------------------------------------

    def request_stop(self, force: bool = False) -> None:
        """Ask for a graceful shutdown (``force``: stop waiting for running jobs)."""
        self.stop.request(force)
        self.events.put(WAKE)

    def run(self) -> int:
        self.signal_handlers.install()
        self.owner.take()
        try:
            return self._run()
        finally:
            self.owner.release()
            self.signal_handlers.restore()

    def wake(self) -> None:
        """(Any thread.) Jobs may be ready: claim without waiting for the poll."""
        if not self._wake_pending.is_set():
            self._wake_pending.set()
            self.events.put(WAKE)

    def threads(self) -> list[threading.Thread]:
        listener = [self.listener.thread] if self.listener else []
        return self.executors.all_threads() + listener

    # -- main loop ------------------------------------------------------------------------------

    def _run(self) -> int:
        self.slots.load_names()
        self.executors.start()
        if self.listener:
            self.listener.start()
        log_start(self)
        stop = self.stop
        try:
            self.db.with_retries(self._register)
        except DatabaseError:
            if not (stop.requested.is_set() and stop.past_give_up()):
                raise
            self.shutdown.finish(database_down=True)  # stopped before the database came back
            log_stats(self, final=True)
            return self.exit_code
        units = units_for(self)
        next_stats = time.monotonic() + self.stats_interval
        next_poll = time.monotonic()
        more_ready = True
        backoff = LoopBackoff()
        grace_deadline: float | None = None
        database_down = False

        while True:
            if stop.requested.is_set() and stop.past_give_up():
                database_down = backoff.failing  # the last step failed: do not wait for another
                if database_down:
                    self.shutdown.leave_to_leases()
                    break
            try:
                self._drain_events(block_for=0)
                if not self._claim_due(more_ready, next_poll) and self.acks.due():
                    self.acks.flush()  # else they wait, or the claim below carries them
                if self.starts.due():
                    self.starts.flush()
                now = time.monotonic()
                for unit in units:
                    unit.run_if_due(now)
                if stop.requested.is_set():
                    if grace_deadline is None:
                        grace_deadline = stop.give_up_at or now + self.shutdown_grace
                        self.shutdown.release_unstarted()
                    if not self.held:
                        break
                    if stop.forced.is_set() or now >= grace_deadline:
                        self.shutdown.abandon_running()
                        break
                else:
                    if self._claim_due(more_ready, next_poll):
                        woken = self._wake_pending.is_set()
                        self._wake_pending.clear()
                        more_ready = self._claim_and_dispatch()
                        # after a wake, look again soon: producers skip notifications sent
                        # less than NOTIFY_COALESCE_SECONDS apart (enqueueing.py)
                        next_poll = time.monotonic() + (
                            min(ECHO_POLL_SECONDS, self.poll_interval)
                            if woken
                            else self.poll_interval
                        )
                    if self.burst and not (more_ready or self.held or self.slots.last_skip):
                        break
                    if self._limit_reached() and not self.held:
                        break
                backoff.reset()
            except DatabaseError as error:
                delay = backoff.failed(error)
                self.db.close()
                if stop.requested.is_set() and stop.past_give_up():
                    continue  # the top of the loop leaves the jobs to their leases
                logger.warning(
                    "database unavailable (%s); retrying in %.1fs with %d job(s) held",
                    one_line(error),
                    delay,
                    len(self.held),
                )
                stop.sleep(delay)
                continue
            if now >= next_stats:
                log_stats(self)
                next_stats = now + self.stats_interval
            # Sleep until something happens: a result, a notification, a timer.
            deadline = min([next_stats] + [unit.next_due for unit in units])
            if not stop.requested.is_set() and self._capacity() > 0 and not more_ready:
                deadline = min(deadline, next_poll)
            if stop.requested.is_set() and grace_deadline is not None:
                deadline = min(deadline, grace_deadline)
            for due in (self.acks.deadline(), self.starts.deadline()):
                if due is not None:
                    deadline = min(deadline, due)
            if self._claim_due(more_ready, next_poll):
                continue
            self._drain_events(block_for=max(0.0, deadline - time.monotonic()))

        self.shutdown.finish(database_down)
        log_stats(self, final=True)
        return self.exit_code

    def _claim_due(self, more_ready: bool, next_poll: float) -> bool:
        """Claim now: jobs may be ready (last claim full, woken, or poll due) and it is worth a
        statement: for sync jobs, an executor may soon be idle (fewer jobs waiting locally than
        executors), half their room is free, or acknowledgements are due; for async jobs, a
        slot is free and async jobs may be ready (``Slots.async_wanted``). Without prefetch
        every free sync slot is an idle executor."""
        if self.stop.requested.is_set() or self._capacity() == 0:
            return False
        fresh = (
            self._wake_pending.is_set() or time.monotonic() >= next_poll or self.slots.kind_freed()
        )
        if not (more_ready or fresh):
            return False
        sync_room, async_room = self.slots.rooms()
        if async_room and self.slots.async_wanted(fresh):
            return True
        return sync_room > 0 and (
            self.executors.waiting() < self.concurrency
            or sync_room * 2 >= min(self.batch_size, self.concurrency + self.prefetch)
            or self.acks.due()  # a statement goes anyway: let it claim too
        )

    @property
    def prefetch(self) -> int:
        """Jobs to hold beyond the executors now."""
        if self.adaptive is None:
            return self.fixed_prefetch
        return self.adaptive.prefetch(self.concurrency)

    def _capacity(self) -> int:
        sync_room, async_room = self.slots.rooms()
        room = sync_room + async_room
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.stats.claimed)
        return max(room, 0)

    def _limit_reached(self) -> bool:
        return self.max_jobs is not None and self.stats.claimed >= self.max_jobs

    def _claim_and_dispatch(self) -> bool:
        """Acknowledge finished jobs and claim for the free slots, in one statement.

        True when the claim was full (more may be ready).
        """
        self.acks.flush_results()  # only jobs that keep their result: the claim carries the others
        limit = min(self._capacity(), self.batch_size)
        acks = self.acks.pending
        plan = self.slots.plan(limit)
        done, jobs = operations.complete_and_claim_jobs(
            self.db.connection(),
            acks,
            plan=plan,
            worker=self.id,
            queues=self.queues,
            lease_seconds=self.lease_seconds,
            skip_names=self.slots.claim_skips(),
            # prepared on a session that keeps its settings: one that may LISTEN does
            prepared=self.listen,
        )
        self.acks.sent(acks, done)
        full = self.slots.filled_a_room(plan, jobs) or len(jobs) == limit
        free_slots = self.concurrency - len(self.held) + len(self.slots.async_held)
        runnable = []
        for job in jobs:
            self.held[job.id] = job
            definition = self.failures.admit(job)
            if definition is not None:
                runnable.append((job, definition))
        # the jobs whose attempt the claim counted go first: the free executors take them at once
        runnable.sort(key=lambda pair: pair[0].held)
        surplus = self.slots.beyond_free(runnable, free_slots)
        # jobs handed back are ready again: a burst worker must not take this claim as the end
        full = full or bool(surplus)
        counted = [job for job in jobs if job.id not in surplus]
        self.stats.claimed += len(counted)
        self.metrics.claimed(counted)
        try:
            if surplus:
                self._hand_back(list(surplus.values()))
                runnable = [(job, d) for job, d in runnable if job.id not in surplus]
            # The claim gave every job the worker's lease; jobs that declare their own get it
            # before they start, in one statement for the batch (none when all use the default).
            own_lease = [job for job, _ in runnable if job.lease_seconds != self.lease_seconds]
            if own_lease:
                operations.extend_leases(self.db.connection(), own_lease)
        finally:
            # The claim has committed: whatever happened to the hand-back or the extension (a
            # lost connection goes on to the main loop's reconnect), the jobs held run, on the
            # worker's lease until the next heartbeat gives them their own.
            for job, definition in runnable:
                self.slots.started(job, definition)
                self.executors.submit(job, definition)
        return full

    def _hand_back(self, jobs: list[ClaimedJob]) -> None:
        """Give claimed jobs back, attempt not spent (one statement)."""
        released = operations.release_jobs(self.db.connection(), jobs)
        for job in jobs:
            self.forget(job)
        self.stats.released += len(released)

    # -- events from the executors and the listener ---------------------------------------------

    def _drain_events(self, block_for: float) -> None:
        if block_for > 0:  # an executor that starts a held job meanwhile wakes it
            block_for = self.starts.before_blocking(block_for)
        try:
            item = self.events.get(timeout=block_for) if block_for > 0 else self.events.get_nowait()
        except queue_module.Empty:
            return
        finally:
            self.starts.wake_me = False
        while True:
            self._handle(item)
            try:
                item = self.events.get_nowait()
            except queue_module.Empty:
                return

    def _handle(self, item) -> None:
        self.owner.check()
        if item is WAKE:
            return
        if isinstance(item, (Succeeded, Failed, HandBack, LostLease)):
            self.starts.finished(item.job)
        if self.timeouts.outcome_dropped(item):
            return
        if isinstance(item, (Succeeded, Failed)) and self.adaptive is not None:
            self.adaptive.observe(item.job.name, item.duration)
        if isinstance(item, Succeeded):
            send(signals.job_succeeded, self.sender, job=item.job, duration=item.duration)
            if item.acked:
                self.finish(item.job)
                self.stats.succeeded += 1
                self.metrics.succeeded(item.job)
            else:
                self.slots.done(item.job)
                self.acks.add(item.job, item.result)
        elif isinstance(item, Failed):
            self.failures.record_failure(item.job, item.error)
        elif isinstance(item, HandBack):
            self.failures.hand_back(item)
        elif isinstance(item, AbortNotice):
            mark_aborted(self, [item.job_id])
        elif isinstance(item, LostLease):
            self.finish(item.job)
            self.stats.lost += 1
            logger.warning(
                "job %s #%s finished after its lease was lost (another worker holds it now); "
                "its transaction was rolled back",
                item.job.name,
                item.job.id,
            )

    def finish(self, job: ClaimedJob) -> None:
        """(Dispatcher.) ``job`` has finished: stop holding it, count it."""
        self.forget(job)
        self.stats.window_finished += 1

    def forget(self, job: ClaimedJob) -> None:
        """(Dispatcher.) Stop tracking this claim of ``job``. Held jobs are keyed by id, and a
        job whose lease expired can be claimed again by this same worker while the old run is
        still going: the old run finishing must not drop the new claim (it would lose its
        heartbeat)."""
        if self.held.get(job.id) is job:
            del self.held[job.id]
            self.slots.done(job)
            self.starts.finished(job)

    def _register(self) -> None:
        operations.register_worker(
            self.db.connection(),
            worker_id=self.id,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
        )
