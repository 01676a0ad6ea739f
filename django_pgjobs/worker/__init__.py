"""The worker: the loop behind ``manage.py runjobs``.

Summary
    One dispatcher thread claims batches sized to free execution slots and hands them to
    ``concurrency`` executor threads (``async def`` jobs: to one event loop thread running up to
    ``async_concurrency`` of them, each with its own ORM lane); it acknowledges successes in
    batches, records failures (retry with backoff, or dead letter) and runs the maintenance
    units (timeout watch, metrics flush, lease heartbeat, registry touch, rescue, prune, stats
    log). A listener thread (when ``LISTEN_NOTIFY``
    is on) wakes it as soon as a job is enqueued and passes on aborts requested (``aborts.py``;
    the heartbeat does too). ``docs/explanation/worker.md`` walks through the parts.

Usage
    ``Worker(queues=["emails"], concurrency=8).run()`` returns the exit code. Tests call
    ``run()`` in-process with ``burst=True``; ``runjobs`` is a thin shell over it.

Structure
    ``Worker`` (``loop.py``) is the composition root: it validates one ``WorkerOptions``
    (``options.py``) and builds each part with only the collaborators it uses, typed; no part
    holds the ``Worker``. The dispatcher's own state (held jobs, counts, thread owner) is one
    ``DispatcherState`` (``state.py``); the claim is ``Claimer`` (``claiming.py``); each
    periodic duty is a ``MaintenanceUnit`` with a frozen config and ``run_once()``.

Options (defaults)
    ``queues`` (None: all), ``concurrency`` (1; ``runjobs``: 4), ``async_concurrency`` (None:
    ``PGJOBS["ASYNC_CONCURRENCY"]``), ``batch_size`` (max jobs per
    claim, None: ``holding.MAX_HELD``), ``prefetch`` (jobs claimed beyond free slots, None:
    adaptive, see ``holding.py``), ``burst`` (False), ``max_jobs`` (None),
    ``poll_interval``/``shutdown_grace``/``listen`` (from settings), ``stats_interval`` (60 s),
    ``inline`` (False; True: every job on the calling thread and its connection, inside its
    transaction, one at a time, no listener, no signal handlers: ``run_jobs()`` in a
    ``TestCase``, see ``inline.py``).

Thread ownership
    - The dispatcher thread (the one calling ``run()``) owns the jobs connection
      (``DispatcherDatabase``), the ``DispatcherState`` (held jobs, stats and metrics counts),
      the acknowledgements, and runs the claim, the failure policy, the maintenance units and
      the shutdown steps. ``DispatcherState.owner.check()`` raises ``WrongThread`` from any
      other thread.
    - Each executor thread owns its thread-local connections (``ExecutorConnections``); the
      dispatcher only reads which job one runs and its server pids, to end abandoned jobs.
    - The listener thread owns its own thread-local connection, in LISTEN.
    - The event loop thread (``async_executor.py``) owns the async jobs' tasks and their ORM
      lanes (``lanes.py``): each running async job's ORM queries run on a lane thread of its
      own, whose connections get an executor's hygiene. The dispatcher reads which async jobs
      run, cancels one through ``cancel_async()``, and reads a lane's job and server pids.
    - Everything else crosses threads as messages on the dispatcher's ``Inbox`` (executors and
      listener to dispatcher) and ``(job, definition)`` items on the executor pool's to-do queue
      (dispatcher to executors); a stop request is a ``StopState`` any thread may set.

Guarantees
    Every completion and failure is fenced by the claim token. An ``atomic`` job's function and
    its completion commit in one transaction on the executor's connection. On SIGTERM/SIGINT the
    worker stops claiming, hands back claimed-but-unstarted jobs without spending an attempt,
    lets running jobs finish for ``shutdown_grace`` seconds (then ends their statements), and
    exits 0; a second signal exits within ``FORCED_EXIT_SECONDS``. After every job its
    executor's connections are idle in autocommit with the session Django configured (what a
    job left open fails that job); a connection found dead before a job, or at its first
    statement, costs no attempt. "Not right now" database errors are waited out. A job past its
    timeout is a failed attempt at once, its lease no longer extended (``timeouts.py``; exit
    status 3 at ``MAX_STUCK_THREADS`` stuck threads and async tasks ignoring their
    cancellation, or a blocked event loop).

Instrumentation
    ``django_pgjobs.signals`` and the ``django_pgjobs.worker`` logger (start-up line, one line
    per failure, a periodic summary).
"""

from .acks import ACK_DELAY_SECONDS
from .claiming import ECHO_POLL_SECONDS
from .connections import ExecutorConnections
from .faults import CONNECTION_ERRORS, TRANSIENT_SQLSTATE_CLASSES, TRANSIENT_SQLSTATES
from .listener import NOTIFY_CHANNEL
from .loop import Worker
from .options import WorkerOptions
from .outcomes import (
    ConnectionClosedByJob,
    LeaseLost,
    RolledBack,
    Stats,
    TransactionLeftOpen,
)
from .ownership import WrongThread
from .stopping import FORCED_EXIT_SECONDS

__all__ = [
    "ACK_DELAY_SECONDS",
    "CONNECTION_ERRORS",
    "ECHO_POLL_SECONDS",
    "FORCED_EXIT_SECONDS",
    "NOTIFY_CHANNEL",
    "TRANSIENT_SQLSTATES",
    "TRANSIENT_SQLSTATE_CLASSES",
    "ConnectionClosedByJob",
    "ExecutorConnections",
    "LeaseLost",
    "RolledBack",
    "Stats",
    "TransactionLeftOpen",
    "Worker",
    "WorkerOptions",
    "WrongThread",
]
