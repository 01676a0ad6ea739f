"""The worker: the loop behind ``manage.py runjobs``.

Summary
    One dispatcher thread owns the jobs connection: it claims batches sized to free execution
    slots, hands them to ``concurrency`` executor threads, acknowledges successes in batches,
    records failures (retry with backoff, or dead letter), extends leases by heartbeat, rescues
    expired leases and keeps the worker registry current. A listener thread (when
    ``LISTEN_NOTIFY`` is on) wakes the dispatcher as soon as a job is enqueued.

Usage
    ``Worker(queues=["emails"], concurrency=8).run()`` returns the exit code. Tests call
    ``run()`` in-process with ``burst=True``; ``runjobs`` is a thin shell over it.

Options (defaults)
    ``queues`` (None: all), ``concurrency`` (1), ``batch_size`` (max jobs per claim, 10),
    ``prefetch`` (jobs claimed beyond free slots, 0), ``burst`` (False), ``max_jobs`` (None),
    ``poll_interval``/``shutdown_grace``/``listen`` (from settings), ``stats_interval`` (60 s).

Guarantees
    Every completion and failure is fenced by the claim token. An ``atomic`` job's function and
    its completion commit in one transaction on the executor's connection. On SIGTERM/SIGINT the
    worker stops claiming, hands back claimed-but-unstarted jobs without spending an attempt,
    lets running jobs finish for ``shutdown_grace`` seconds (then ends their statements), and
    exits 0; a second signal exits within ``FORCED_EXIT_SECONDS``. After every job its
    executor's connections are idle in autocommit with the session Django configured (what a
    job left open fails that job); a connection found dead before a job, or at its first
    statement, costs no attempt. "Not right now" database errors are waited out.

Instrumentation
    ``django_pgjobs.signals`` and the ``django_pgjobs.worker`` logger (start-up line, one line
    per failure, a periodic summary).
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import random
import re
import select
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from psycopg.pq import TransactionStatus

from . import errors, metrics, operations, redaction, registry, signals
from .conf import get_config
from .context import reset_current_job, set_current_job
from .operations import ClaimedJob

logger = logging.getLogger("django_pgjobs.worker")

CONNECTION_ERRORS = (OperationalError, InterfaceError)
# Errors that say "not right now" rather than "wrong": the dispatcher waits them out (back-off,
# one log line per wait) and repeats the step, which is safe because a failed statement changed
# nothing and every step is fenced. By SQLSTATE class or code (PostgreSQL appendix A).
TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57P")  # connection, resources, operator intervention
TRANSIENT_SQLSTATES = frozenset(
    {
        "25006",  # read_only_sql_transaction: a hot standby, default_transaction_read_only
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available (lock_timeout)
        "57014",  # query_canceled (statement_timeout, pg_cancel_backend)
    }
)
# A second SIGTERM/SIGINT: the process is gone this soon, whatever the database does (a
# statement or a connection attempt can hang on an unreachable server).
FORCED_EXIT_SECONDS = 1.5
# Longest a finished job's acknowledgement waits to share a statement with others (or to ride
# on the next claim). A worker killed meanwhile loses nothing: the job runs again after its lease.
ACK_DELAY_SECONDS = 0.05
# A worker woken by a notification claims again this soon after, for the jobs whose producers
# skipped their notification (enqueueing.NOTIFY_COALESCE_SECONDS).
ECHO_POLL_SECONDS = 0.02
NOTIFY_CHANNEL = "pgjobs"


class LeaseLost(Exception):
    """An atomic job finished but its claim token no longer matched: rolled back."""


class RolledBack(Exception):
    """An atomic job marked its transaction for rollback: its completion cannot commit."""


class ConnectionClosedByJob(Exception):
    """An atomic job closed its database connection: its transaction was rolled back."""


class TransactionLeftOpen(Exception):
    """A job returned with its connection inside a transaction: its writes were rolled back."""


# Messages from executor and listener threads to the dispatcher.
@dataclass
class _Succeeded:
    job: ClaimedJob
    duration: float
    acked: bool = False  # atomic jobs complete in their own transaction


@dataclass
class _Failed:
    job: ClaimedJob
    error: BaseException
    duration: float


@dataclass
class _LostLease:
    job: ClaimedJob


@dataclass
class _HandBack:
    """The job's first statement met a connection that had died while idle: not its fault."""

    job: ClaimedJob
    error: BaseException


_WAKE = object()


@dataclass
class Stats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lost: int = 0
    released: int = 0
    window_started: float = field(default_factory=time.monotonic)
    window_finished: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.retried + self.dead_lettered + self.lost


class Worker:
    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        batch_size: int = 10,
        prefetch: int = 0,
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
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{option} must be an int >= {low}, not {value!r}")
        if max_jobs is not None and (not isinstance(max_jobs, int) or max_jobs < 1):
            raise ValueError(f"max_jobs must be an int >= 1, not {max_jobs!r}")
        self.queues = queues
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.prefetch = prefetch
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
        self.hostname = socket.gethostname()
        self.id = f"{self.hostname}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

        self.stats = Stats()
        self.metrics = metrics.QueueMetrics()  # per-queue counts for the admin dashboard
        self._events: queue_module.Queue = queue_module.Queue()
        self._todo: queue_module.Queue = queue_module.Queue()
        self._held: dict[int, ClaimedJob] = {}  # claimed and not finished (queued or running)
        self._acks: list[ClaimedJob] = []
        self._acks_since = 0.0  # when the oldest unsent acknowledgement was queued
        self._stop = threading.Event()  # graceful shutdown requested
        self._force = threading.Event()  # second signal: give up on running jobs now
        self._wake_pending = threading.Event()
        self._threads: list[threading.Thread] = []
        self._executors: list[_ExecutorConnections] = []  # one per executor thread
        self._abandoned = False  # the grace period ran out with jobs still running
        self._give_up_at: float | None = None  # stop requested: database waits end here

    # -- public ---------------------------------------------------------------------------------

    def request_stop(self, force: bool = False) -> None:
        """Ask for a graceful shutdown (``force``: stop waiting for running jobs)."""
        if force or self._stop.is_set():
            self._force.set()
            self._give_up_at = time.monotonic()
        elif self._give_up_at is None:
            self._give_up_at = time.monotonic() + self.shutdown_grace
        self._stop.set()
        self._events.put(_WAKE)

    def run(self) -> int:
        previous = self._install_signals()
        try:
            return self._run()
        finally:
            self._restore_signals(previous)

    # -- main loop ------------------------------------------------------------------------------

    def _run(self) -> int:
        self._start_threads()
        self._log_start()
        try:
            self._with_retries(self._register)
        except DatabaseError:
            if not (self._stop.is_set() and self._past_give_up()):
                raise
            self._shutdown(database_down=True)  # stopped before the database came back
            return 0
        now = time.monotonic()
        next_heartbeat = now + self.heartbeat_seconds
        next_rescue = now  # rescue once at start: picks up what a crashed predecessor left
        next_stats = now + self.stats_interval
        next_poll = now
        more_ready = True
        db_backoff = 0.0
        grace_deadline: float | None = None
        database_down = False

        while True:
            if self._stop.is_set() and self._past_give_up():
                database_down = db_backoff > 0  # the last step failed: do not wait for another
                if database_down:
                    self._leave_to_leases()
                    break
            try:
                self._drain_events(block_for=0)
                if not self._claim_due(more_ready, next_poll) and self._acks_due():
                    self._flush_acks()  # else they wait, or the claim below carries them
                self.metrics.maybe_flush(self._connection())
                now = time.monotonic()
                if now >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = now + self.heartbeat_seconds
                if now >= next_rescue:
                    self._rescue()
                    next_rescue = now + self.rescue_interval * random.uniform(0.8, 1.2)
                if self._stop.is_set():
                    if grace_deadline is None:
                        grace_deadline = self._give_up_at or now + self.shutdown_grace
                        self._release_unstarted()
                    if not self._held:
                        break
                    if self._force.is_set() or now >= grace_deadline:
                        self._abandon_running()
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
                    if self.burst and not more_ready and not self._held:
                        break
                    if self._limit_reached() and not self._held:
                        break
                db_backoff = 0.0
            except DatabaseError as error:
                if not _is_transient(error):
                    raise
                db_backoff = min(max(db_backoff * 2, 0.5), 10.0)
                self._close_connection()
                if self._stop.is_set() and self._past_give_up():
                    continue  # the top of the loop leaves the jobs to their leases
                logger.warning(
                    "database unavailable (%s); retrying in %.1fs with %d job(s) held",
                    _one_line(error),
                    db_backoff,
                    len(self._held),
                )
                self._sleep(db_backoff)
                continue
            if now >= next_stats:
                self._log_stats()
                next_stats = now + self.stats_interval
            # Sleep until something happens: a result, a notification, a timer.
            deadline = min(next_heartbeat, next_rescue, next_stats)
            if not self._stop.is_set() and self._capacity() > 0 and not more_ready:
                deadline = min(deadline, next_poll)
            if self._stop.is_set() and grace_deadline is not None:
                deadline = min(deadline, grace_deadline)
            if self._acks:
                deadline = min(deadline, self._acks_since + ACK_DELAY_SECONDS)
            if self._claim_due(more_ready, next_poll):
                continue
            self._drain_events(block_for=max(0.0, deadline - time.monotonic()))

        self._shutdown(database_down)
        return 0

    def _past_give_up(self) -> bool:
        return self._give_up_at is not None and time.monotonic() >= self._give_up_at

    def _claim_due(self, more_ready: bool, next_poll: float) -> bool:
        """Claim now: jobs may be ready (last claim full, woken, or poll due) and it is worth a
        statement: an executor may soon be idle (fewer jobs waiting locally than executors), or
        half the room is free. Without prefetch every free slot is an idle executor."""
        if self._stop.is_set():
            return False
        room = self._capacity()
        if room == 0:
            return False
        if not (more_ready or self._wake_pending.is_set() or time.monotonic() >= next_poll):
            return False
        return self._todo.qsize() < self.concurrency or room * 2 >= min(
            self.batch_size, self.concurrency + self.prefetch
        )

    def _acks_due(self) -> bool:
        """Send acknowledgements alone when enough wait, when nothing else is held (the batch
        cannot grow), or when the oldest has waited ``ACK_DELAY_SECONDS``."""
        return bool(self._acks) and (
            len(self._acks) >= self.batch_size
            or len(self._acks) == len(self._held)
            or time.monotonic() - self._acks_since >= ACK_DELAY_SECONDS
        )

    def _capacity(self) -> int:
        # Finished jobs waiting for their acknowledgement free their slot: the acknowledgement
        # travels with the next claim.
        room = self.concurrency + self.prefetch - len(self._held) + len(self._acks)
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.stats.claimed)
        return max(room, 0)

    def _limit_reached(self) -> bool:
        return self.max_jobs is not None and self.stats.claimed >= self.max_jobs

    # -- claiming -------------------------------------------------------------------------------

    def _claim_and_dispatch(self) -> bool:
        """Acknowledge finished jobs and claim for the free slots, in one statement.

        True when the claim was full (more may be ready).
        """
        limit = min(self._capacity(), self.batch_size)
        acks = self._acks
        done, jobs = operations.complete_and_claim_jobs(
            self._connection(),
            acks,
            limit=limit,
            worker=self.id,
            queues=self.queues,
            lease_seconds=self.lease_seconds,
        )
        self._acks = []
        self._settle_acks(acks, done)
        self.stats.claimed += len(jobs)
        self.metrics.claimed(jobs)
        runnable = []
        for job in jobs:
            self._held[job.id] = job
            definition = self._admit(job)
            if definition is not None:
                runnable.append((job, definition))
        # The claim gave every job the worker's lease; jobs that declare their own get it before
        # they start, in one statement for the batch (none when every job uses the default).
        own_lease = [job for job, _ in runnable if job.lease_seconds != self.lease_seconds]
        try:
            if own_lease:
                operations.extend_leases(self._connection(), own_lease)
        finally:
            # The claim has committed: whatever happened to the extension (a lost connection
            # goes on to the main loop's reconnect), the jobs run, on the worker's lease until
            # the next heartbeat gives them their own.
            for item in runnable:
                self._todo.put(item)
        return len(jobs) == limit

    def _admit(self, job: ClaimedJob) -> registry.JobDefinition | None:
        """The definition to run ``job`` with, or None after dead-lettering a job that names no
        registered function or whose arguments do not fit it."""
        try:
            definition = registry.get(job.name)
        except registry.UnknownJobError as error:
            self._dead_letter(
                job,
                reason=f"unknown job {job.name!r}: no function is registered under this name "
                "in this worker",
                error=errors.error_entry(
                    job.attempts, error_type="UnknownJob", message=str(error), worker=self.id
                ),
            )
            return None
        try:
            definition.check_arguments(job.args, job.kwargs)
        except TypeError as error:
            self._dead_letter(
                job,
                reason=f"arguments do not fit {job.name}: {error}",
                error=errors.error_entry(
                    job.attempts, error_type="BadArguments", message=str(error), worker=self.id
                ),
            )
            return None
        job.lease_seconds = definition.get_lease_seconds()
        return definition

    # -- executing (executor threads) -------------------------------------------------------------

    def _start_threads(self) -> None:
        for index in range(self.concurrency):
            thread = threading.Thread(
                target=self._executor, name=f"pgjobs-executor-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        if self.listen:
            thread = threading.Thread(target=self._listener, name="pgjobs-listener", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _executor(self) -> None:
        own = _ExecutorConnections()
        self._executors.append(own)
        try:
            with own.observing():
                while True:
                    item = self._todo.get()
                    if item is None:
                        return
                    job, definition = item
                    own.before_job(job)
                    result = self._execute(job, definition)
                    self._events.put(self._settle_connections(own, result))
        finally:
            connections.close_all()

    def _settle_connections(self, own: _ExecutorConnections, result):
        """(Executor thread.) Clean up after the job; what it left open is its failure, and a
        connection that had died while idle is not: that job goes back without an attempt."""
        left_open = own.after_job()
        if isinstance(result, _Failed) and own.stale_connection_failed:
            return _HandBack(result.job, result.error)
        if left_open is None:
            return result
        if isinstance(result, _Succeeded) and not result.acked:
            return _Failed(result.job, left_open, result.duration)
        if isinstance(result, _Succeeded):  # an atomic job, committed: another alias was left
            logger.error("job %s #%s: %s", result.job.name, result.job.id, left_open)
        return result

    def _execute(self, job: ClaimedJob, definition: registry.JobDefinition):
        _send(signals.job_started, job=job)
        started = time.monotonic()
        token = set_current_job(job)
        try:
            if definition.is_atomic():
                connection = connections[self.alias]
                _discard_if_broken(connection)
                with transaction.atomic(using=self.alias):
                    definition.run(job.args, job.kwargs)
                    _check_transaction_kept(connection)
                    if job.id not in operations.complete_jobs(connection, [job]):
                        raise LeaseLost()
                return _Succeeded(job, time.monotonic() - started, acked=True)
            definition.run(job.args, job.kwargs)
            return _Succeeded(job, time.monotonic() - started)
        except LeaseLost:
            return _LostLease(job)
        except KeyboardInterrupt as error:
            logger.warning("job %s #%s raised KeyboardInterrupt: shutting down", job.name, job.id)
            self.request_stop()
            return _Failed(job, error, time.monotonic() - started)
        except BaseException as error:  # noqa: B036 - SystemExit from a job is a failure, too
            if isinstance(error, CONNECTION_ERRORS):
                _discard_if_broken(connections[self.alias])
            return _Failed(job, error, time.monotonic() - started)
        finally:
            reset_current_job(token)

    # -- results (dispatcher) ---------------------------------------------------------------------

    def _drain_events(self, block_for: float) -> None:
        try:
            item = (
                self._events.get(timeout=block_for) if block_for > 0 else self._events.get_nowait()
            )
        except queue_module.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self._events.get_nowait()
            except queue_module.Empty:
                return

    def _handle(self, item) -> None:
        if item is _WAKE:
            return
        if isinstance(item, _Succeeded):
            _send(signals.job_succeeded, job=item.job, duration=item.duration)
            if item.acked:
                self._finish(item.job)
                self.stats.succeeded += 1
                self.metrics.succeeded(item.job)
            else:
                if not self._acks:
                    self._acks_since = time.monotonic()
                self._acks.append(item.job)
        elif isinstance(item, _Failed):
            self._record_failure(item.job, item.error)
        elif isinstance(item, _HandBack):
            self._hand_back(item)
        elif isinstance(item, _LostLease):
            self._finish(item.job)
            self.stats.lost += 1
            logger.warning(
                "job %s #%s finished after its lease was lost (another worker holds it now); "
                "its transaction was rolled back",
                item.job.name,
                item.job.id,
            )

    def _finish(self, job: ClaimedJob) -> None:
        self._forget(job)
        self.stats.window_finished += 1

    def _forget(self, job: ClaimedJob) -> None:
        """Stop tracking this claim of ``job``. Held jobs are keyed by id, and a job whose lease
        expired can be claimed again by this same worker while the old run is still going: the
        old run finishing must not drop the new claim (it would lose its heartbeat)."""
        if self._held.get(job.id) is job:
            del self._held[job.id]

    def _flush_acks(self) -> None:
        if not self._acks:
            return
        batch = self._acks
        done = operations.complete_jobs(self._connection(), batch)
        self._acks = []
        self._settle_acks(batch, done)

    def _settle_acks(self, batch: list[ClaimedJob], done: set[int]) -> None:
        for job in batch:
            self._finish(job)
            if job.id in done:
                self.stats.succeeded += 1
                self.metrics.succeeded(job)
            else:
                self.stats.lost += 1
                logger.warning(
                    "job %s #%s succeeded but its lease was lost before the acknowledgement; "
                    "another worker may run it again",
                    job.name,
                    job.id,
                )

    def _record_failure(self, job: ClaimedJob, error: BaseException) -> None:
        entry = errors.error_entry(job.attempts, error, worker=self.id)
        entry = redaction.hide_secrets(entry, job)  # stored, shown and logged: no secrets
        summary = f"{entry['type']}: {_one_line(entry['message'])}"
        if job.is_last_attempt:
            self._dead_letter(
                job,
                reason=f"attempts exhausted ({job.attempts}/{job.max_attempts}): {summary}",
                error=entry,
            )
            return
        definition = registry.get(job.name)
        delay = definition.get_retry().delay(job.attempts)
        self._finish(job)
        if self._with_retries(lambda: operations.retry_job(self._connection(), job, entry, delay)):
            self.stats.retried += 1
            self.metrics.retried(job)
            _send(signals.job_failed, job=job, error=error, retry_in=delay)
            logger.warning(
                "job %s #%s failed (attempt %d/%d): %s; retrying in %.1fs",
                job.name,
                job.id,
                job.attempts,
                job.max_attempts,
                summary,
                delay,
            )
        else:
            self.stats.lost += 1
            logger.warning(
                "job %s #%s failed but its lease was lost; its new owner decides", job.name, job.id
            )

    def _dead_letter(self, job: ClaimedJob, *, reason: str, error: dict) -> None:
        self._finish(job)
        dead_id = self._with_retries(
            lambda: operations.dead_letter_job(self._connection(), job, reason=reason, error=error)
        )
        if dead_id is None:
            self.stats.lost += 1
            return
        self.stats.dead_lettered += 1
        self.metrics.dead(job)
        _send(signals.job_dead_lettered, job=job, reason=reason)
        # a forged row's name is anything: printed as a literal, it cannot fake log lines
        name = job.name if job.name.isprintable() else repr(job.name)
        logger.error("job %s #%s dead-lettered (#%s): %s", name, job.id, dead_id, reason)

    # -- leases, rescue, registry -------------------------------------------------------------------

    def _heartbeat(self) -> None:
        connection = self._connection()
        held = list(self._held.values())
        if held:
            kept = operations.extend_leases(connection, held)
            lost = [job for job in held if job.id not in kept and job.id in self._held]
            for job in lost:
                logger.warning("lease of job %s #%s was lost (rescued elsewhere)", job.name, job.id)
        operations.touch_worker(
            connection, self.id, forget_seconds=max(self.lease_seconds, 5 * self.heartbeat_seconds)
        )

    def _rescue(self) -> None:
        connection = self._connection()
        requeued, buried = operations.rescue_expired(connection)
        if requeued or buried:
            logger.warning(
                "rescued %d job(s) with expired leases (%d requeued, %d dead-lettered)",
                requeued + buried,
                requeued,
                buried,
            )
        if self.keep_succeeded > 0:
            operations.prune_succeeded(connection, self.keep_succeeded)

    def _register(self) -> None:
        operations.register_worker(
            self._connection(),
            worker_id=self.id,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
        )

    # -- shutdown -----------------------------------------------------------------------------------

    def _release_unstarted(self) -> None:
        unstarted = []
        while True:
            try:
                item = self._todo.get_nowait()
            except queue_module.Empty:
                break
            if item is not None:
                unstarted.append(item[0])
        if not unstarted:
            return
        released = (
            self._with_retries(lambda: operations.release_jobs(self._connection(), unstarted))
            or set()
        )
        for job in unstarted:
            self._forget(job)
        self.stats.released += len(released)
        logger.info("handed back %d claimed job(s) that had not started", len(released))

    def _hand_back(self, item: _HandBack) -> None:
        """(Dispatcher.) Give back, attempt not spent, a job whose first statement found its
        executor's connection dead (dropped while idle: nothing the job did)."""
        released = self._with_retries(
            lambda: operations.release_jobs(self._connection(), [item.job])
        )
        self._finish(item.job)
        if released:
            self.stats.released += 1
        logger.warning(
            "job %s #%s handed back without spending an attempt: its first statement found the "
            "connection dead (%s)",
            item.job.name,
            item.job.id,
            _one_line(item.error),
        )

    def _abandon_running(self) -> None:
        """Grace period over: end the statements of the jobs still running (their locks go at
        once) and record those jobs as failed attempts."""
        self._abandoned = True
        self._end_abandoned_statements()
        self._flush_acks()  # finished jobs are not running: acknowledge them first
        error = RuntimeError(
            f"worker {self.id} shut down before the job finished "
            f"(shutdown grace {self.shutdown_grace:g}s)"
        )
        for job in list(self._held.values()):
            self._record_failure(job, error)
        logger.warning("shutdown grace expired; gave up on running job(s)")

    def _end_abandoned_statements(self) -> None:
        """(Dispatcher.) Terminate the server processes of the executors still running a job: a
        job left running would keep its statement going and its locks held after the worker
        exits."""
        by_alias: dict[str, list[int]] = {}
        for executor in self._executors:
            job = executor.job
            if job is not None and self._held.get(job.id) is job:
                for alias, pids in executor.backend_pids().items():
                    by_alias.setdefault(alias, []).extend(pids)
        for alias, pids in by_alias.items():
            try:
                connection = self._connection() if alias == self.alias else connections[alias]
                ended = operations.terminate_backends(connection, pids)
            except DatabaseError as error:
                logger.warning(
                    "could not end the abandoned jobs' statements on %r: %s",
                    alias,
                    _one_line(error),
                )
                continue
            logger.warning("ended %d database session(s) of abandoned job(s) on %r", ended, alias)

    def _leave_to_leases(self) -> None:
        """(Dispatcher.) Stopping with the database unavailable: the jobs still held cannot be
        recorded, their leases bring them back (spending the attempt of those that were
        running)."""
        self._abandoned = True
        if self._held:
            logger.warning(
                "database unavailable at shutdown; %d claimed job(s) go back to the queue when "
                "their lease expires",
                len(self._held),
            )

    def _shutdown(self, database_down: bool = False) -> None:
        self._stop.set()
        if not database_down:
            try:
                self._flush_acks()
                self.metrics.maybe_flush(self._connection(), force=True)
                operations.unregister_worker(self._connection(), self.id)
            except DatabaseError as error:
                logger.warning("could not finish cleanly: %s", _one_line(error))
        for _ in range(self.concurrency):
            self._todo.put(None)
        # Idle executors exit at once on None; busy ones (jobs given up on after the grace
        # period) are daemon threads: wait for them briefly, in total, not per thread.
        deadline = time.monotonic() + (0.5 if self._held or self._abandoned else 5.0)
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._close_connection()
        self._log_stats(final=True)

    # -- plumbing -----------------------------------------------------------------------------------

    def _connection(self):
        connection = connections[self.alias]
        _discard_if_broken(connection)
        return connection

    def _close_connection(self) -> None:
        try:
            connections[self.alias].close()
        except DatabaseError:
            pass

    def _with_retries(self, operation):
        """Run a dispatcher database step, riding out connection loss (reconnect with backoff).

        Fenced steps are safe to repeat: a step that did commit before the connection dropped
        matches nothing the second time.
        """
        delay = 0.5
        while True:
            try:
                return operation()
            except DatabaseError as error:
                if not _is_transient(error) or self._force.is_set() or self._past_give_up():
                    raise
                logger.warning(
                    "database unavailable (%s); retrying in %.1fs", _one_line(error), delay
                )
                self._close_connection()
                self._sleep(delay)
                delay = min(delay * 2, 10.0)

    def _sleep(self, seconds: float) -> None:
        """Wait, but not past the end of the shutdown grace (nor at all after a second signal:
        callers check ``_past_give_up`` before waiting again, so this never spins)."""
        deadline = time.monotonic() + seconds
        while not self._force.is_set():
            # a stop requested meanwhile shortens the wait
            left = min(deadline, self._give_up_at or deadline) - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def _listener(self) -> None:
        """Wake the dispatcher on NOTIFY pgjobs (payload: the queue of a due job)."""
        delay = 0.5
        wanted = set(self.queues) if self.queues else None
        while not self._stop.is_set():
            connection = connections[self.alias]
            try:
                connection.ensure_connection()
                raw = connection.connection
                raw.execute(f"LISTEN {NOTIFY_CHANNEL}")
                self._wake()  # anything enqueued while we were not listening
                delay = 0.5
                while not self._stop.is_set():
                    for notify in raw.notifies(timeout=0.25):
                        if wanted is None or notify.payload in wanted:
                            self._wake()
                        if self._stop.is_set():
                            break
            except Exception as error:  # noqa: BLE001 - the listener must never die
                logger.info("listener reconnecting in %.1fs: %s", delay, _one_line(error))
                try:
                    connection.close()
                except Exception:  # noqa: BLE001
                    pass
                self._sleep(delay)
                delay = min(delay * 2, 10.0)
        connections.close_all()

    def _wake(self) -> None:
        if not self._wake_pending.is_set():
            self._wake_pending.set()
            self._events.put(_WAKE)

    def _install_signals(self):
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return None
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signals(self, previous) -> None:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self._stop.is_set():
            logger.warning(
                "%s again: not waiting for running jobs; exiting within %gs",
                name,
                FORCED_EXIT_SECONDS,
            )
            self.request_stop(force=True)
            _exit_after(FORCED_EXIT_SECONDS)
        else:
            logger.info(
                "%s: stopping; waiting up to %gs for %d running job(s)",
                name,
                self.shutdown_grace,
                len(self._held),
            )
            self.request_stop()

    def _log_start(self) -> None:
        settings_dict = connections[self.alias].settings_dict
        logger.info(
            "worker %s started: queues=%s concurrency=%d batch=%d prefetch=%d database=%s "
            "(%s@%s:%s/%s) wake=%s",
            self.id,
            ",".join(self.queues) if self.queues else "all",
            self.concurrency,
            self.batch_size,
            self.prefetch,
            self.alias,
            settings_dict.get("USER") or "-",
            settings_dict.get("HOST") or "local",
            settings_dict.get("PORT") or "5432",
            settings_dict.get("NAME"),
            f"listen+poll {self.poll_interval:g}s"
            if self.listen
            else f"poll {self.poll_interval:g}s",
        )

    def _log_stats(self, final: bool = False) -> None:
        now = time.monotonic()
        elapsed = max(now - self.stats.window_started, 1e-9)
        rate = self.stats.window_finished / elapsed
        s = self.stats
        logger.info(
            "%s: processed=%d succeeded=%d retried=%d dead=%d lost=%d released=%d rate=%.1f/s",
            "stopped" if final else "summary",
            s.finished,
            s.succeeded,
            s.retried,
            s.dead_lettered,
            s.lost,
            s.released,
            rate,
        )
        s.window_started = now
        s.window_finished = 0


class _ExecutorConnections:
    """One executor thread's database connections, made fit before each job and checked after
    it, as Django's request cycle does around a request (``close_old_connections``).

    Run by its executor thread only; the dispatcher reads ``job`` and ``backend_pids()`` to end
    the statements of a job it abandons. Costs nothing to a job that touches no database.
    """

    def __init__(self) -> None:
        self.wrappers = [connections[alias] for alias in connections]  # this thread's own
        self.job: ClaimedJob | None = None  # the job running now
        self._open_before: set[str] = set()  # aliases whose connection the job found open
        self._used: set[str] = set()  # aliases the job ran statements on
        self._session_changed = False
        self.stale_connection_failed = False

    def observing(self) -> ExitStack:
        """Watch every statement of this thread's connections (see ``_observe``)."""
        stack = ExitStack()
        for wrapper in self.wrappers:
            stack.enter_context(wrapper.execute_wrapper(self._observe))
        return stack

    def before_job(self, job: ClaimedJob) -> None:
        """Close what the job must not get: a connection past ``CONN_MAX_AGE`` or broken
        (Django's checks), or one whose server already hung up while it sat idle."""
        for wrapper in self.wrappers:
            if wrapper.connection is None:
                continue
            try:
                wrapper.close_if_unusable_or_obsolete()  # also re-arms CONN_HEALTH_CHECKS
                if wrapper.connection is not None and _hung_up(wrapper.connection):
                    _discard(wrapper)
            except Exception:  # noqa: BLE001 - a connection we cannot check is not kept
                _discard(wrapper)
        self._open_before = {w.alias for w in self.wrappers if w.connection is not None}
        self._used.clear()
        self._session_changed = False
        self.stale_connection_failed = False
        self.job = job

    def after_job(self) -> TransactionLeftOpen | None:
        """Put every connection back to idle autocommit with the session Django set up; the
        error to charge the job with when it left a transaction open (rolled back here)."""
        self.job = None
        left_open = []
        for wrapper in self.wrappers:
            raw = wrapper.connection
            if raw is None:
                continue
            try:
                status = raw.info.transaction_status
                if wrapper.in_atomic_block or status not in (
                    TransactionStatus.IDLE,
                    TransactionStatus.UNKNOWN,
                ):
                    left_open.append(wrapper.alias)
                    _discard(wrapper)  # the server rolls back what the job left open
                elif status == TransactionStatus.UNKNOWN:  # closed or broken
                    _discard(wrapper)
                elif self._session_changed and wrapper.alias in self._used:
                    _discard(wrapper)  # a fresh session is the one Django configures
                else:
                    if not wrapper.get_autocommit():
                        wrapper.set_autocommit(True)  # off, but nothing pending: no harm done
                    wrapper.close_if_unusable_or_obsolete()
            except Exception:  # noqa: BLE001 - a connection we cannot check is not kept
                _discard(wrapper)
        if not left_open:
            return None
        return TransactionLeftOpen(
            "the job returned with its connection to database "
            f"{', '.join(map(repr, left_open))} inside a transaction (a raw BEGIN, "
            "transaction.set_autocommit(False) without a commit, or an atomic block never "
            "exited); what it left uncommitted was rolled back"
        )

    def backend_pids(self) -> dict[str, list[int]]:
        """The server processes of this executor's open connections, by alias (read by the
        dispatcher: a plain attribute read of another thread's connection)."""
        pids: dict[str, list[int]] = {}
        for wrapper in self.wrappers:
            raw = wrapper.connection
            try:
                pid = raw.info.backend_pid if raw is not None and not raw.closed else 0
            except Exception:  # noqa: BLE001 - closed meanwhile
                pid = 0
            if pid:
                pids.setdefault(wrapper.alias, []).append(pid)
        return pids

    def _observe(self, execute, sql, params, many, context):
        """Note statements that change the session, and whether the job's first statement on a
        connection it found open failed on that connection (it died while idle)."""
        alias = context["connection"].alias
        if not self._session_changed and isinstance(sql, str) and _SESSION_SQL.search(sql):
            self._session_changed = True
        if alias in self._used:
            return execute(sql, params, many, context)
        self._used.add(alias)
        try:
            return execute(sql, params, many, context)
        except CONNECTION_ERRORS:
            if alias in self._open_before:
                self.stale_connection_failed = True
            raise


# Statements that change a session past its transaction: SET (not SET LOCAL, SET TRANSACTION,
# SET CONSTRAINTS), RESET, DISCARD, set_config(). Over-matching costs one reconnection.
_SESSION_SQL = re.compile(
    r"^\s*(?:(?:set)\s+(?!local\b|transaction\b|constraints\b)|reset\b|discard\b)"
    r"|\bset_config\s*\(",
    re.IGNORECASE,
)


def _hung_up(raw) -> bool:
    """True when an idle connection's socket has something to read. An executor's connection
    never LISTENs, so that is the server's goodbye (terminated backend, idle_session_timeout,
    shutdown) or EOF: no round trip needed to see it."""
    if raw.closed or raw.broken:
        return True
    try:
        fd = raw.pgconn.socket
    except Exception:  # noqa: BLE001 - no socket: not usable
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


def _discard(wrapper) -> None:
    """Close a connection whatever state the job left it in; Django reconnects on next use
    (``connect()`` resets the transaction state)."""
    wrapper.in_atomic_block = False  # else close() keeps the dead connection for the block
    try:
        wrapper.close()
    except Exception:  # noqa: BLE001
        wrapper.connection = None


def _check_transaction_kept(connection) -> None:
    """Raise when an atomic job's transaction can no longer carry its completion."""
    if connection.closed_in_transaction:
        raise ConnectionClosedByJob(
            "the job closed its database connection inside its atomic transaction "
            "(connection.close() or close_old_connections()), so its writes were rolled back "
            "and its completion cannot commit with them"
        )
    if connection.needs_rollback:
        raise RolledBack(
            "the job marked its transaction for rollback "
            "(transaction.set_rollback), so its completion cannot commit with it"
        )


def _discard_if_broken(connection) -> None:
    """Close a connection that saw an error and no longer answers (Django reconnects lazily)."""
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False


def _is_transient(error: BaseException) -> bool:
    """A database error worth waiting out (see TRANSIENT_SQLSTATES)."""
    if isinstance(error, CONNECTION_ERRORS):  # psycopg's class for 08, 40, 53, 57P... too
        return True
    sqlstate = getattr(error.__cause__, "sqlstate", None) or ""
    return sqlstate in TRANSIENT_SQLSTATES or sqlstate.startswith(TRANSIENT_SQLSTATE_CLASSES)


def _exit_after(seconds: float) -> None:
    """Leave the process after ``seconds`` if the orderly exit has not happened by then (a
    statement or a connection attempt on an unreachable server can block for minutes)."""

    def exit_now() -> None:
        time.sleep(seconds)
        logger.warning("forced stop: exiting now; claimed jobs return when their lease expires")
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=exit_now, name="pgjobs-forced-exit", daemon=True).start()


def _send(signal_obj, **kwargs) -> None:
    try:
        signal_obj.send_robust(sender=Worker, **kwargs)
    except Exception:  # noqa: BLE001
        logger.exception("signal receiver failed")


def _one_line(value) -> str:
    text = str(value).strip().splitlines()
    return (text[0] if text else "")[:300]
