"""A worker's options: one frozen value, validated once, by the rules of ``validation.py``.

``WorkerOptions.build(...)`` takes what ``Worker(...)`` and ``runjobs`` take (None: the setting
or the worker's own choice), checks each value and fills in the settings (``PGJOBS``) the parts
need, so that no part reads the settings or checks an option itself. ``runjobs`` parses its
command line with the same checks (``validation.check_count``, ``check_seconds``,
``check_positive_seconds``).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..conf import get_config
from ..validation import check_count, check_positive_seconds, check_queue, check_seconds
from .holding import MAX_HELD

#: Seconds between the worker's summary log lines, unless ``stats_interval`` says otherwise.
STATS_INTERVAL_SECONDS = 60.0


@dataclass(frozen=True)
class WorkerOptions:
    """Everything a worker's parts are configured with; see the package docstring for each."""

    queues: tuple[str, ...] | None
    concurrency: int
    async_concurrency: int
    batch_size: int
    prefetch: int | None  # None: adaptive (holding.py)
    burst: bool
    max_jobs: int | None
    poll_interval: float
    shutdown_grace: float
    listen: bool
    stats_interval: float
    install_signal_handlers: bool
    inline: bool  # on the caller's thread and connection (``inline.py``): run_jobs() in a test
    schedules: bool  # fire the recurring jobs (``scheduler.py``); default: not a burst worker
    liveness_file: str | None  # None: none written
    only_ids: tuple[int, ...] | None  # claim only these jobs (immediate mode); None: any
    # from the settings
    alias: str
    lease_seconds: float
    heartbeat_seconds: float
    rescue_interval: float
    vacuum_interval: float | None  # None: only autovacuum
    keep_succeeded: float
    keep_results: float
    keep_workflows: float
    dead_letter_retention: tuple[float | None, int | None, int]  # max age, max per name, batch
    max_stuck: int
    max_result_bytes: int
    unknown_job_grace: float
    release: str
    misfire_grace: float
    outbox_publisher: str  # "": runjobs relays no outbox

    @classmethod
    def build(
        cls,
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
        stats_interval: float = STATS_INTERVAL_SECONDS,
        install_signal_handlers: bool = True,
        inline: bool = False,
        schedules: bool | None = None,
        liveness_file: str | os.PathLike | None = None,
        only_ids: Sequence[int] | None = None,
        database: str | None = None,
    ) -> WorkerOptions:
        """``ValueError`` naming the option for any value out of its range."""
        config = get_config()
        checked = _queues(queues)
        alias = _database(config, database, checked)
        return cls(
            queues=checked,
            concurrency=check_count("concurrency", concurrency, 1),
            async_concurrency=check_count(
                "async_concurrency", _default(async_concurrency, config.ASYNC_CONCURRENCY), 1
            ),
            batch_size=check_count("batch_size", _default(batch_size, MAX_HELD), 1),
            prefetch=None if prefetch is None else check_count("prefetch", prefetch, 0),
            burst=bool(burst),
            max_jobs=None if max_jobs is None else check_count("max_jobs", max_jobs, 1),
            poll_interval=check_positive_seconds(
                "poll_interval", _default(poll_interval, config.POLL_INTERVAL_SECONDS)
            ),
            shutdown_grace=check_seconds(
                "shutdown_grace", _default(shutdown_grace, config.SHUTDOWN_GRACE_SECONDS)
            ),
            # inline: nothing to wake (the caller runs every step), and LISTEN needs a thread
            listen=False if inline else config.LISTEN_NOTIFY if listen is None else bool(listen),
            stats_interval=check_positive_seconds("stats_interval", stats_interval),
            install_signal_handlers=bool(install_signal_handlers) and not inline,
            inline=bool(inline),
            # a burst worker (run_jobs() in a test, a drain) runs what was enqueued, not the
            # recurring jobs: it would write schedule rows and enqueue jobs nobody asked for;
            # the schedules live on PGJOBS["DATABASE"] alone (docs/howto/databases.md)
            schedules=(not burst if schedules is None else bool(schedules))
            and alias == config.DATABASE,
            liveness_file=None if liveness_file is None else _liveness_file(liveness_file),
            only_ids=None if only_ids is None else tuple(int(i) for i in only_ids),
            **_from_settings(config, inline, alias),
        )

    @property
    def forget_seconds(self) -> float:
        """A worker missing this many seconds of heartbeats (or one lease) is shown as gone."""
        return max(self.lease_seconds, 5 * self.heartbeat_seconds)


def _from_settings(config, inline: bool, alias: str) -> dict:
    """The options the parts take from the settings (``PGJOBS``)."""
    return dict(
        alias=alias,
        lease_seconds=config.LEASE_SECONDS,
        heartbeat_seconds=config.HEARTBEAT_SECONDS,
        rescue_interval=config.RESCUE_INTERVAL_SECONDS,
        vacuum_interval=config.VACUUM_INTERVAL_SECONDS,
        keep_succeeded=config.KEEP_SUCCEEDED_SECONDS,
        keep_results=config.KEEP_RESULTS_SECONDS,
        keep_workflows=config.KEEP_WORKFLOWS_SECONDS,
        dead_letter_retention=(
            config.DEAD_LETTER_MAX_AGE_SECONDS,
            config.DEAD_LETTER_MAX_PER_NAME,
            config.DEAD_LETTER_PRUNE_BATCH,
        ),
        max_stuck=config.MAX_STUCK_THREADS,
        max_result_bytes=config.MAX_PAYLOAD_BYTES,
        unknown_job_grace=config.UNKNOWN_JOB_GRACE_SECONDS,
        release=config.RELEASE,
        misfire_grace=config.SCHEDULE_MISFIRE_GRACE_SECONDS,
        # the caller's thread only; and the outbox lives on PGJOBS["DATABASE"] alone
        outbox_publisher="" if inline or alias != config.DATABASE else config.OUTBOX_PUBLISHER,
    )


def _queues(queues: Sequence[str] | None) -> tuple[str, ...] | None:
    """The queues named, checked; None (every queue) for None or none named."""
    if queues is None:
        return None
    if isinstance(queues, str):
        raise ValueError(f"queues must be a list of queue names, not the string {queues!r}")
    return tuple(check_queue(queue) for queue in queues) or None


def _database(config, database: str | None, queues: tuple[str, ...] | None) -> str:
    """The one database the worker serves: ``database``, else its queues' (``routing``), else
    ``PGJOBS["DATABASE"]``. ``ValueError`` for queues of two databases, or of another one."""
    routes = config.QUEUE_DATABASES
    homes = {queue: routes.get(queue, config.DATABASE) for queue in queues or ()}
    if database is not None:
        if database not in (config.DATABASE, *routes.values()):
            raise ValueError(
                f"database: {database!r} holds no queue: it is neither PGJOBS['DATABASE'] "
                f"({config.DATABASE!r}) nor one of PGJOBS['QUEUE_DATABASES']"
            )
        elsewhere = sorted(queue for queue, home in homes.items() if home != database)
        if elsewhere:
            raise ValueError(
                f"queues {', '.join(elsewhere)} live on another database than {database!r} "
                f"(PGJOBS['QUEUE_DATABASES']): a worker serves the queues of one database"
            )
        return database
    aliases = sorted(set(homes.values()))
    if len(aliases) > 1:
        where = "; ".join(
            f"{alias}: {', '.join(q for q, home in homes.items() if home == alias)}"
            for alias in aliases
        )
        raise ValueError(
            f"a worker serves the queues of one database, and these live on {len(aliases)} "
            f"(PGJOBS['QUEUE_DATABASES']): {where}. Run one runjobs per database."
        )
    return aliases[0] if aliases else config.DATABASE


def _liveness_file(path: str | os.PathLike) -> str:
    """The path of the liveness file, whose directory must exist."""
    text = os.fspath(path)
    if not text or not os.path.isdir(os.path.dirname(os.path.abspath(text))):
        raise ValueError(f"liveness_file: no directory to write {text!r} in")
    return text


def _default(value, default):
    return default if value is None else value


def new_worker_id() -> tuple[str, str]:
    """``(hostname, id)``: the id is unique per process and run, ``host:pid:random``."""
    hostname = socket.gethostname()
    return hostname, f"{hostname}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
