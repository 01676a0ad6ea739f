"""Settings: the one module that reads ``settings.PGJOBS``.

Every key is declared once, as a field of ``Config``: its type (the annotation), its default
and its range (``setting(default, bounds)``); ``validate()``, ``get_config()`` and the system
check pgjobs.E002 read those declarations. Documented in docs/reference/settings.md.
``get_config()`` is cached and cleared on ``setting_changed`` so ``override_settings(PGJOBS=...)``
works in tests.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .limits import MAX_SECONDS
from .validation import check_queue, check_queue_rate_limits


@dataclass(frozen=True)
class Bounds:
    """The range of a numeric setting; ``problem()`` says what is wrong with a value."""

    low: float | None = None
    low_included: bool = True
    high: float | None = None
    why: str = ""

    def problem(self, key: str, value: float) -> str | None:
        if self.high is not None and self.high != MAX_SECONDS:  # a closed range: name both ends
            if not self.low <= value <= self.high:
                return f"{key} must be between {self.low:g} and {self.high:g}, not {value!r}"
            return None
        if self.low is not None and (
            value < self.low or (value == self.low and not self.low_included)
        ):
            wanted = f"{self.low:g} or more" if self.low_included else f"greater than {self.low:g}"
            return f"{key} must be {wanted}{self.why}, not {value!r}"
        if self.high is not None and value > self.high:
            return f"{key} must be at most {MAX_SECONDS:,} seconds (10 years), not {value!r}"
        return None


#: Durations: bounded by ``MAX_SECONDS`` so that ``now() + value`` stays a valid PostgreSQL
#: timestamp (a bigger one would fail inside the worker, not here).
POSITIVE_SECONDS = Bounds(low=0, low_included=False, high=MAX_SECONDS)
SECONDS = Bounds(low=0, high=MAX_SECONDS)
POSITIVE = Bounds(low=0, low_included=False)


#: The shortest ``METRICS_TOKEN`` accepted: a token is a password that scrapers send in clear
#: text on every request; make it long and random (``secrets.token_urlsafe(32)``).
MIN_TOKEN_CHARS = 24


def check_token(token: str) -> str:
    """Surrounding whitespace is not part of the token (a secret read from a file ends with a
    newline): compared without it."""
    token = token.strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"METRICS_TOKEN must be empty or at least {MIN_TOKEN_CHARS} characters "
            "(secrets.token_urlsafe(32) makes one)"
        )
    return token


def check_queue_databases(mapping: dict[str, str]) -> None:
    """Queue names (as a queue is named anywhere) mapped to non-empty alias strings."""
    for queue, alias in mapping.items():
        check_queue(queue)
        if not isinstance(alias, str) or not alias:
            raise ValueError(f"the database of queue {queue!r} must be an alias, not {alias!r}")


def setting(default: Any, bounds: Bounds | None = None, check: Any = None) -> Any:
    """A field of ``Config``: its default, and the range or check its values must pass (its type
    is the field's annotation)."""
    return field(default=default, metadata={"bounds": bounds, "check": check})


@dataclass(frozen=True)
class Config:
    #: Django database alias that holds the jobs tables.
    DATABASE: str = "default"
    #: Queues whose jobs live on another database than ``DATABASE``: queue name -> alias (each
    #: alias migrated with the jobs tables). Enqueue writes a job on its queue's database and a
    #: worker serves the queues of one database (docs/howto/databases.md). Empty: every queue on
    #: ``DATABASE``.
    QUEUE_DATABASES: dict[str, str] = field(
        default_factory=dict, hash=False, metadata={"check": check_queue_databases}
    )
    #: Queue used when neither the job nor the call names one.
    DEFAULT_QUEUE: str = setting("default", check=check_queue)
    #: Attempts a job gets unless it says otherwise (attempts are counted at claim time).
    DEFAULT_MAX_ATTEMPTS: int = setting(5, POSITIVE)
    #: Default of ``@job(atomic=...)``: run the handler and its completion in one transaction.
    DEFAULT_ATOMIC: bool = False
    #: Seconds a claim is valid without a heartbeat; an expired lease gets the job rescued.
    LEASE_SECONDS: float = setting(60.0, POSITIVE_SECONDS)
    #: Seconds between lease extensions (and worker-registry updates) while jobs run.
    HEARTBEAT_SECONDS: float = setting(10.0, POSITIVE_SECONDS)
    #: Seconds between checks for expired leases.
    RESCUE_INTERVAL_SECONDS: float = setting(15.0, POSITIVE_SECONDS)
    #: Seconds between a worker's looks at the jobs table's dead rows; past autovacuum's own
    #: threshold it runs ``VACUUM (SKIP_LOCKED)`` on a thread of its own, instead of waiting up
    #: to ``autovacuum_naptime`` (a minute). None: only autovacuum (worker/vacuum.py).
    VACUUM_INTERVAL_SECONDS: float | None = setting(10.0, POSITIVE_SECONDS)
    #: Seconds a worker sleeps between polls when nothing wakes it earlier.
    POLL_INTERVAL_SECONDS: float = setting(1.0, POSITIVE_SECONDS)
    #: Wake workers with LISTEN/NOTIFY. Turn off behind PgBouncer in transaction mode.
    LISTEN_NOTIFY: bool = True
    #: Run enqueue's INSERT as a server-side prepared statement. Turn off behind PgBouncer older
    #: than 1.21 in transaction mode (1.21+ with ``max_prepared_statements`` handles them). The
    #: worker's statements are never prepared (docs/explanation/claim.md).
    PREPARED_STATEMENTS: bool = True
    #: Retry policy: delay = min(cap, base * factor ** (attempt - 1)), minus up to jitter * delay.
    RETRY_BASE_SECONDS: float = setting(2.0, SECONDS)
    RETRY_FACTOR: float = setting(2.0, Bounds(low=1, why=" (delays never shrink)"))
    RETRY_CAP_SECONDS: float = setting(3600.0, SECONDS)
    RETRY_JITTER: float = setting(0.5, Bounds(low=0, high=1))
    #: Keep successful jobs this many seconds (status ``successful``); 0 deletes them at once.
    KEEP_SUCCEEDED_SECONDS: float = setting(0.0, SECONDS)
    #: Keep successful jobs that kept their result (``keep_result``) this many seconds.
    KEEP_RESULTS_SECONDS: float = setting(7 * 24 * 3600.0, SECONDS)
    #: Dead letters older than this many seconds are pruned by the workers; None: kept.
    DEAD_LETTER_MAX_AGE_SECONDS: float | None = setting(None, POSITIVE_SECONDS)
    #: Dead letters kept per job name, the newest; older ones are pruned. None: all kept.
    DEAD_LETTER_MAX_PER_NAME: int | None = setting(None, Bounds(low=0))
    #: Most dead letters one prune statement deletes (one transaction, one batch).
    DEAD_LETTER_PRUNE_BATCH: int = setting(1000, Bounds(low=1, high=100_000))
    #: Keep finished workflows (succeeded, failed, aborted) this many seconds, then the workers
    #: prune them with their cancelled steps; one with a job left, or a dead letter, is kept.
    KEEP_WORKFLOWS_SECONDS: float = setting(7 * 24 * 3600.0, SECONDS)
    #: Seconds a worker waits for running jobs after SIGTERM/SIGINT before it gives up on them.
    SHUTDOWN_GRACE_SECONDS: float = setting(30.0, SECONDS)
    #: Largest accepted JSON payload (args + kwargs), in bytes.
    MAX_PAYLOAD_BYTES: int = setting(1_048_576, POSITIVE)
    #: Longest error text (message + traceback) kept per attempt, in characters.
    MAX_ERROR_CHARS: int = setting(20_000, POSITIVE)
    #: Seconds a job may run when neither ``.using(timeout=...)`` nor ``@job(timeout=...)`` says;
    #: None: no limit. A job past its time is a failed attempt (``JobTimeout``).
    DEFAULT_TIMEOUT_SECONDS: float | None = setting(None, POSITIVE_SECONDS)
    #: Async jobs one worker runs at once on its event loop (``runjobs --async-concurrency``).
    ASYNC_CONCURRENCY: int = setting(32, Bounds(low=1, high=10_000))
    #: Executor threads stuck in a timed-out job that a worker tolerates: at this many it stops
    #: claiming, hands back what it holds and exits with status 3 for its supervisor to restart.
    MAX_STUCK_THREADS: int = setting(4, Bounds(low=1, high=1000))
    #: Seconds after its enqueue during which a job whose name (or task) a worker does not know
    #: is handed back, attempt not spent, for a worker that knows it (a rolling deploy: the web
    #: processes run the new release before every worker does); after it, it is dead-lettered.
    UNKNOWN_JOB_GRACE_SECONDS: float = setting(600.0, SECONDS)
    #: This deployment's release (a version, a commit), in the worker's log lines; "" if unset.
    RELEASE: str = ""
    #: Seconds after a schedule's fire time during which a worker still fires it as on time;
    #: older fire times were missed (no worker ran) and follow the schedule's ``catch_up``.
    SCHEDULE_MISFIRE_GRACE_SECONDS: float = setting(60.0, POSITIVE_SECONDS)
    #: The transactional outbox's publisher: a broker URL (``amqp://...``, ``nats://...``) or
    #: the dotted path of a publisher or a callable; "" (the default): ``runjobs`` relays
    #: nothing (``manage.py pgjobs_relay --publisher`` still can). docs/howto/outbox.md.
    OUTBOX_PUBLISHER: str = ""
    #: Outbox events one relay claims and publishes per batch.
    OUTBOX_BATCH_SIZE: int = setting(100, Bounds(low=1, high=10_000))
    #: Seconds a relay holds the events it claimed; a relay that died gives them back after it.
    OUTBOX_LEASE_SECONDS: float = setting(60.0, POSITIVE_SECONDS)
    #: Seconds between a relay's looks at an empty outbox.
    OUTBOX_POLL_SECONDS: float = setting(1.0, POSITIVE_SECONDS)
    #: Longest wait between tries while the broker is unreachable (the wait doubles up to it).
    OUTBOX_RETRY_CAP_SECONDS: float = setting(60.0, POSITIVE_SECONDS)
    #: Modules imported at start-up besides every installed app's ``jobs`` module.
    JOB_MODULES: tuple[str, ...] = ()
    #: Immediate mode, for development and tests (immediate.py): a job enqueued in a transaction
    #: runs in the enqueuing process when it commits (at once in autocommit), through the
    #: worker's claim and completion. Refused by the system check pgjobs.E005 when DEBUG is off...
    IMMEDIATE: bool = False
    #: ...unless this says it is meant (a test settings module: the test runner turns DEBUG off).
    IMMEDIATE_WITHOUT_DEBUG: bool = False
    #: Argument keys whose values are shown as ``'********'`` in the admin and logs.
    REDACT_KEYS: tuple[str, ...] = ()
    #: A secret that lets a scraper read ``pgjobs/metrics`` (and ``pgjobs/health``) with
    #: ``Authorization: Bearer <token>``; "" (the default): only staff users who may view jobs.
    METRICS_TOKEN: str = setting("", check=check_token)
    #: Let anyone read ``pgjobs/health`` (its body then says only which checks failed, never a
    #: queue name or a number): for load balancers and uptime checks that cannot send a token.
    HEALTH_PUBLIC: bool = False
    #: ``pgjobs/health`` fails when a queue's oldest due job has waited longer than this.
    HEALTH_MAX_DUE_AGE_SECONDS: float = setting(300.0, POSITIVE_SECONDS)
    #: Rate limits per queue, ``{"emails": "20/s"}`` (also ``/m``, ``/h``): the jobs of such a
    #: queue start at most that often across all workers (docs/howto/flow-control.md).
    QUEUE_RATE_LIMITS: dict[str, str] = field(
        default_factory=dict, metadata={"bounds": None, "check": check_queue_rate_limits}
    )


#: The Python values each annotation of ``Config`` accepts in ``settings.PGJOBS``.
ACCEPTED_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "float | None": (int, float, type(None)),
    "int | None": (int, type(None)),
    "tuple[str, ...]": (list, tuple),
    "dict[str, str]": (dict,),
}
FIELDS = {f.name: f for f in fields(Config)}
DEFAULTS = Config()


class ConfigError(ValueError):
    """``settings.PGJOBS`` holds an unknown key or a value of the wrong type or range."""


def _type_problem(key: str, value: Any) -> str | None:
    types = ACCEPTED_TYPES[FIELDS[key].type]
    if isinstance(value, bool) and bool not in types:
        return f"{key} must be a number, not {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key} must be a finite number, not {value!r}"
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        return f"{key} must be {names}, not {type(value).__name__}"
    return None


def validate(raw: dict[str, Any]) -> list[str]:
    """Return one human-readable problem per bad key of ``raw`` (empty when all is well)."""
    problems = []
    for key, value in raw.items():
        if key not in FIELDS:
            problems.append(f"unknown key {key!r} (known keys: {', '.join(sorted(FIELDS))})")
        elif problem := _type_problem(key, value):
            problems.append(problem)
    if problems:
        return problems
    merged = {**{name: getattr(DEFAULTS, name) for name in FIELDS}, **raw}
    for name, declared in FIELDS.items():
        bounds, check = declared.metadata.get("bounds"), declared.metadata.get("check")
        if (
            bounds is not None
            and merged[name] is not None
            and (problem := bounds.problem(name, merged[name]))
        ):
            problems.append(problem)
        if check is not None:
            try:
                check(merged[name])
            except ValueError as error:
                problems.append(f"{name}: {error}")
    if merged["HEARTBEAT_SECONDS"] * 2 > merged["LEASE_SECONDS"]:
        problems.append(
            "HEARTBEAT_SECONDS must be at most half of LEASE_SECONDS so one late heartbeat "
            f"does not lose the lease (got {merged['HEARTBEAT_SECONDS']} and "
            f"{merged['LEASE_SECONDS']})"
        )
    return problems


def raw_settings() -> dict[str, Any]:
    raw = getattr(settings, "PGJOBS", None)
    if raw is None:  # not set: every default
        return {}
    if not isinstance(raw, dict):  # [], 0, False too: a mistake, not "no settings"
        raise ConfigError(f"settings.PGJOBS must be a dict, not {type(raw).__name__}")
    return raw


@functools.cache
def get_config() -> Config:
    """The validated configuration. Raises ``ConfigError`` when ``settings.PGJOBS`` is invalid."""
    raw = raw_settings()
    problems = validate(raw)
    if problems:
        raise ConfigError("settings.PGJOBS: " + "; ".join(problems))
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in raw.items()}
    if "QUEUE_DATABASES" in values:  # a copy: the settings' dict is not the config's
        values["QUEUE_DATABASES"] = dict(values["QUEUE_DATABASES"])
    return Config(**values)


def queue_database(queue: str) -> str:
    """The alias of the database that holds the jobs of ``queue``."""
    config = get_config()
    return config.QUEUE_DATABASES.get(queue, config.DATABASE)


def job_databases() -> tuple[str, ...]:
    """Every alias that holds jobs: ``DATABASE`` first, then those of ``QUEUE_DATABASES``."""
    config = get_config()
    return tuple(dict.fromkeys([config.DATABASE, *config.QUEUE_DATABASES.values()]))


def queues_elsewhere(alias: str) -> list[str]:
    """The queues routed by ``QUEUE_DATABASES`` to another database than ``alias``."""
    return sorted(q for q, a in get_config().QUEUE_DATABASES.items() if a != alias)


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting in ("PGJOBS", "DATABASES"):
        get_config.cache_clear()
