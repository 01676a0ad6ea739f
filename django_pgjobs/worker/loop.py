"""The worker: the composition root of its parts, and the dispatcher's loop.

``Worker`` validates one ``WorkerOptions`` and builds each part with only what it uses (no part
holds the ``Worker``). Each turn of the loop: handle the events the executors and the listener
sent; claim for the free slots (carrying the pending acknowledgements) or send those alone; run
the due maintenance units; during a stop, hand back unstarted jobs and wait out the grace. Then
sleep until the next event or timer. A "not right now" database error ends the turn: the loop
waits (``faults.py``) and the next turn repeats what failed.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import threading
import time
from dataclasses import dataclass, field

from django.db import DatabaseError

from .. import operations, registry, signals, tracing
from ..outbox import relay as outbox_relay
from .aborts import AbortNotice, mark_aborted
from .acks import Acknowledgements
from .claiming import Claimer
from .executors import ExecutorPool
from .failures import FailurePolicy
from .faults import DispatcherDatabase, LoopBackoff
from .holding import Prefetch
from .inline import InlineDatabase, InlineExecutors
from .listener import Listener
from .logs import log_finished, log_start, log_stats, warn_unused_queues
from .maintenance import (
    DeadLetterRetention,
    HeartbeatConfig,
    LeaseHeartbeat,
    LivenessConfig,
    LivenessFile,
    MaintenanceUnit,
    MetricsConfig,
    MetricsFlush,
    PruneConfig,
    Pruner,
    RegistryConfig,
    RegistryTouch,
    RescueConfig,
    Rescuer,
    StatsLog,
    StatsLogConfig,
)
from .options import WorkerOptions, new_worker_id
from .outcomes import WAKE, Failed, HandBack, Inbox, Stats, Succeeded, Superseded, one_line, send
from .scheduler import Scheduler, SchedulerConfig
from .shutdown import Shutdown
from .slots import Slots
from .starts import PendingStarts
from .state import DispatcherState
from .stopping import SignalHandlers, StopState
from .timeouts import Timeouts
from .vacuum import TableVacuum, VacuumConfig

logger = logging.getLogger("django_pgjobs.worker")


@dataclass
class Turns:
    """What one turn of the loop leaves the next: the back-off while the database is away and,
    once a stop is requested, when the grace ends."""

    backoff: LoopBackoff = field(default_factory=LoopBackoff)
    grace_deadline: float | None = None
    database_down: bool = False  # stopping with the database away: leave the jobs to their leases


class Worker:
    """``Worker(queues=["emails"], concurrency=8).run()``; the options: ``WorkerOptions.build``
    (or pass a ``WorkerOptions``)."""

    def __init__(self, options: WorkerOptions | None = None, /, **kwargs) -> None:
        if options is not None and kwargs:
            raise TypeError("pass either a WorkerOptions or keyword options, not both")
        self.options = options if options is not None else WorkerOptions.build(**kwargs)
        self.hostname, self.id = new_worker_id()
        self.sender = Worker  # of every django_pgjobs signal
        self.units: list[MaintenanceUnit] = []  # built when the loop starts
        self.liveness: LivenessFile | None = None  # one of the units, run first in a turn
        self.vacuum: TableVacuum | None = None  # one of the units: not inline, not turned off
        self._wire(self.options)
        self.signal_handlers = SignalHandlers(
            self.stop,
            lambda: self.inbox.put(WAKE),
            lambda: self.acks.unacknowledged(list(self.state.held.values())),
            self.options.install_signal_handlers,
        )

    def _wire(self, o: WorkerOptions) -> None:
        """Build the parts, each with what it uses. Thread ownership: the package docstring."""
        self.state = DispatcherState()
        self.inbox = Inbox()  # any thread -> dispatcher
        self.stop = StopState(o.shutdown_grace)
        self.db = (InlineDatabase if o.inline else DispatcherDatabase)(o.alias, self.stop)
        self.acks = Acknowledgements(self.db, self.state, o.batch_size)
        self.starts = PendingStarts(self.db, self.state, self.inbox)
        self.failures = FailurePolicy(
            self.db, self.state, self.id, self.sender, o.unknown_job_grace, o.release
        )
        self.executors = (InlineExecutors if o.inline else ExecutorPool)(
            alias=o.alias,
            concurrency=o.concurrency,
            inbox=self.inbox,
            starts=self.starts,
            sender=self.sender,
            request_stop=self.request_stop,
            max_result_bytes=o.max_result_bytes,
        )
        self.prefetch = Prefetch(o.prefetch, o.concurrency)
        self.slots = Slots(
            self.state,
            self.acks,
            self.prefetch,
            concurrency=o.concurrency,
            async_concurrency=o.async_concurrency,
            poll_interval=o.poll_interval,
        )
        self.timeouts = Timeouts(
            self.db, self.state, self.executors, self.failures, self.stop, o.max_stuck
        )
        self.claimer = Claimer(
            db=self.db,
            state=self.state,
            stop=self.stop,
            inbox=self.inbox,
            slots=self.slots,
            acks=self.acks,
            executors=self.executors,
            failures=self.failures,
            options=o,
            worker_id=self.id,
        )
        self.listener = Listener(o.alias, o.queues, self.stop, self.inbox) if o.listen else None
        if o.liveness_file is not None:  # touched from the start, waiting to register included
            self.liveness = LivenessFile(
                LivenessConfig(o.liveness_file, o.heartbeat_seconds), self.db
            )
        self.shutdown = Shutdown(
            db=self.db,
            state=self.state,
            stop=self.stop,
            executors=self.executors,
            acks=self.acks,
            failures=self.failures,
            timeouts=self.timeouts,
            worker_id=self.id,
        )

    def _maintenance_units(self) -> list[MaintenanceUnit]:
        """The periodic units, in the order they run within a turn."""
        o, db = self.options, self.db
        if o.vacuum_interval is not None and not o.inline:
            self.vacuum = TableVacuum(db, VacuumConfig(o.vacuum_interval))
        return [
            *([self.liveness] if self.liveness else []),
            self.timeouts,
            MetricsFlush(db, MetricsConfig(), self.state.metrics),
            LeaseHeartbeat(
                db,
                HeartbeatConfig(o.heartbeat_seconds),
                self.state,
                lambda ids: mark_aborted(self.state, self.executors, ids),
            ),
            RegistryTouch(db, RegistryConfig(self.id, o.heartbeat_seconds, o.forget_seconds)),
            Rescuer(db, RescueConfig(o.rescue_interval)),
            *([self.vacuum] if self.vacuum else []),
            Pruner(
                db,
                PruneConfig(
                    o.rescue_interval,
                    keep_succeeded_seconds=o.keep_succeeded,
                    keep_results_seconds=o.keep_results,
                    dead_letters=DeadLetterRetention(*o.dead_letter_retention),
                    keep_workflows_seconds=o.keep_workflows,
                ),
            ),
            *(
                [Scheduler(db, SchedulerConfig(misfire_grace_seconds=o.misfire_grace))]
                if o.schedules
                else []
            ),
            StatsLog(StatsLogConfig(o.stats_interval), self.state.stats),
            *(
                [outbox_relay.relay_from_settings(db, o.outbox_publisher)]
                if o.outbox_publisher
                else []
            ),
        ]

    # -- public ---------------------------------------------------------------------------------

    @property
    def stats(self) -> Stats:
        return self.state.stats

    @property
    def exit_code(self) -> int:
        """0, or ``timeouts.STUCK_EXIT_CODE`` (3): stopped for stuck threads or a blocked loop."""
        return self.timeouts.exit_code

    def request_stop(self, force: bool = False) -> None:
        """(Any thread.) Ask for a graceful shutdown (``force``: stop waiting for running
        jobs)."""
        self.stop.request(force)
        self.inbox.put(WAKE)

    def run(self) -> int:
        self.signal_handlers.install()
        self.state.owner.take()
        try:
            return self._run()
        finally:
            self.state.owner.release()
            self.signal_handlers.restore()

    def wake(self) -> None:
        """(Any thread.) Jobs may be ready: claim without waiting for the poll."""
        self.inbox.wake()

    def threads(self) -> list[threading.Thread]:
        listener = [self.listener.thread] if self.listener else []
        vacuum = [self.vacuum.thread] if self.vacuum and self.vacuum.thread else []
        return self.executors.all_threads() + listener + vacuum

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> int:
        turns = Turns()
        if self._start():
            while self._turn(turns):
                pass
        else:  # stopped before the database came back
            turns.database_down = True
        self.shutdown.wind_up(turns.database_down, self.threads, self.units)
        log_stats(self.state.stats, final=True)
        return self.exit_code

    def _start(self) -> bool:
        """Start the threads and register; False when a stop came before the database did."""
        self.slots.load_names()
        self.executors.start()
        if self.listener:
            self.listener.start()
        log_start(self.options, self.id, self.slots.enabled)
        if self.liveness:
            self.liveness.run_if_due(time.monotonic())
        try:
            self.db.with_retries(self._register)
        except DatabaseError:
            if not (self.stop.requested.is_set() and self.stop.past_give_up()):
                raise
            return False
        if self.options.queues:
            warn_unused_queues(self.options.queues, registry.queues_in_use(self.db.connection()))
        self.units = self._maintenance_units()
        return True

    def _turn(self, turns: Turns) -> bool:
        """One turn; False when the loop ends."""
        stop = self.stop
        if stop.requested.is_set() and stop.past_give_up() and turns.backoff.failing:
            turns.database_down = True  # the last step failed: do not wait for another
            self.shutdown.leave_to_leases()
            return False
        if self.liveness:  # before any statement: a turn that waits for the database touches it
            self.liveness.run_if_due(time.monotonic())
        try:
            self._drain_events(block_for=0)
            claim_due = self.claimer.due()  # the claim carries the acknowledgements
            if not claim_due and self.acks.due():
                self.acks.flush()
            if self.starts.due():
                self.starts.flush()
            now = time.monotonic()
            for unit in self.units:
                unit.run_if_due(now)
            if stop.requested.is_set():
                if self._stop_step(turns, now):
                    return False
            else:
                if claim_due:
                    self.claimer.claim()
                if self._done():
                    return False
            turns.backoff.reset()
        except DatabaseError as error:
            self._wait_out(error, turns)
            return True
        self._sleep(turns)
        return True

    def _stop_step(self, turns: Turns, now: float) -> bool:
        """During a stop: hand back the unstarted jobs once, then wait for the running ones until
        the grace ends. True when the loop ends."""
        if turns.grace_deadline is None:
            turns.grace_deadline = self.stop.give_up_at or now + self.options.shutdown_grace
            self.shutdown.release_unstarted()
        if not self.state.held:
            return True
        if self.stop.forced.is_set() or now >= turns.grace_deadline:
            self.shutdown.abandon_running()
            return True
        return False

    def _done(self) -> bool:
        """A burst worker found nothing more to do, or ``max_jobs`` were claimed and ran."""
        claimer = self.claimer
        if self.options.burst and not (
            claimer.more_ready or self.state.held or self.slots.last_skip or claimer.flow_soon
        ):
            if claimer.finished_at_claim == self.state.stats.finished:
                return True
            # jobs finished since the last claim may have enqueued more (a chain's next step,
            # a keyed job): both claims look once more before leaving
            claimer.more_ready, claimer.flow_at = True, time.monotonic()
        return claimer.limit_reached() and not self.state.held

    def _wait_out(self, error: DatabaseError, turns: Turns) -> None:
        """A turn failed on the database: wait (``LoopBackoff``) unless the stop's grace is
        over (the next turn then leaves the jobs to their leases); else raise ``error``."""
        delay = turns.backoff.failed(error)
        self.db.close()
        if self.stop.requested.is_set() and self.stop.past_give_up():
            return
        logger.warning(
            "database unavailable (%s); retrying in %.1fs with %d job(s) held",
            one_line(error),
            delay,
            len(self.state.held),
        )
        self.stop.sleep(delay)

    def _sleep(self, turns: Turns) -> None:
        """Until something happens: a result, a notification, a timer."""
        stop = self.stop
        deadline = min(unit.next_due for unit in self.units)
        if not stop.requested.is_set() and not self.claimer.more_ready:
            if self.claimer.capacity() > 0:
                deadline = min(deadline, self.claimer.next_look())
        if stop.requested.is_set() and turns.grace_deadline is not None:
            deadline = min(deadline, turns.grace_deadline)
        for due in (self.acks.deadline(), self.starts.deadline()):
            if due is not None:
                deadline = min(deadline, due)
        if self.claimer.due():
            return
        self._drain_events(block_for=max(0.0, deadline - time.monotonic()))

    # -- events from the executors and the listener ---------------------------------------------

    def _drain_events(self, block_for: float) -> None:
        if block_for > 0:  # an executor that starts a held job meanwhile wakes it
            block_for = self.starts.before_blocking(block_for)
        try:
            item = self.inbox.get(block_for)
        except queue_module.Empty:
            return
        finally:
            self.starts.wake_me = False
        while True:
            self._handle(item)
            try:
                item = self.inbox.get(0)
            except queue_module.Empty:
                return

    def _handle(self, item) -> None:
        state = self.state
        state.owner.check()
        if item is WAKE:
            return
        if isinstance(item, AbortNotice):
            mark_aborted(state, self.executors, item.job_ids)
            return
        self.starts.finished(item.job)  # whatever the outcome: the statement ending it records it
        try:
            self._record_outcome(item)
        finally:
            if item.job.span is not None:  # the attempt's span (tracing): its outcome is known
                tracing.attempt_ended(item.job, getattr(item, "error", None), _outcome_of(item))

    def _record_outcome(self, item) -> None:
        state = self.state
        if self.timeouts.outcome_dropped(item):
            return
        if isinstance(item, (Succeeded, Failed)):
            self.prefetch.observe(item.job.name, item.duration)
            if logger.isEnabledFor(logging.DEBUG):  # runjobs -v 2: every finished job
                log_finished(item)
        if isinstance(item, Succeeded):
            self._succeeded(item)
        elif isinstance(item, Failed):
            self.failures.record_failure(item.job, item.error)
        elif isinstance(item, HandBack):
            self.failures.hand_back(item)
        elif isinstance(item, Superseded):
            state.finished(item.job)
            state.stats.lost += 1
            logger.warning(
                "job %s #%s finished after its lease was lost (another worker holds it now); "
                "its transaction was rolled back",
                item.job.name,
                item.job.id,
            )

    def _succeeded(self, item: Succeeded) -> None:
        state = self.state
        send(signals.job_succeeded, self.sender, job=item.job, duration=item.duration)
        if item.acked:  # an atomic job: completed in its own transaction
            state.finished(item.job)
            state.stats.succeeded += 1
            state.metrics.succeeded(item.job)
        else:
            state.slot_freed(item.job)
            self.acks.add(item.job, item.result)

    def _register(self) -> None:
        o = self.options
        operations.register_worker(
            self.db.connection(),
            worker_id=self.id,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=o.queues,
            concurrency=o.concurrency,
        )


def _outcome_of(item) -> str:
    """The outcome of an attempt's span unless the failure policy recorded one."""
    if isinstance(item, Succeeded):
        return tracing.SUCCEEDED
    return tracing.HANDED_BACK if isinstance(item, HandBack) else tracing.LOST
