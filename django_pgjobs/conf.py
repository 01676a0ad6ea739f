"""Settings: the one module that reads ``settings.PGJOBS``.

Every key, its type and its default is listed in ``DEFAULTS`` and documented in
docs/reference/settings.md. ``get_config()`` is cached and cleared on ``setting_changed`` so
``override_settings(PGJOBS=...)`` works in tests.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .limits import MAX_SECONDS


@dataclass(frozen=True)
class Config:
    #: Django database alias that holds the jobs tables.
    DATABASE: str = "default"
    #: Queue used when neither the job nor the call names one.
    DEFAULT_QUEUE: str = "default"
    #: Attempts a job gets unless it says otherwise (attempts are counted at claim time).
    DEFAULT_MAX_ATTEMPTS: int = 5
    #: Default of ``@job(atomic=...)``: run the handler and its completion in one transaction.
    DEFAULT_ATOMIC: bool = False
    #: Seconds a claim is valid without a heartbeat; an expired lease gets the job rescued.
    LEASE_SECONDS: float = 60.0
    #: Seconds between lease extensions (and worker-registry updates) while jobs run.
    HEARTBEAT_SECONDS: float = 10.0
    #: Seconds between checks for expired leases.
    RESCUE_INTERVAL_SECONDS: float = 15.0
    #: Seconds a worker sleeps between polls when nothing wakes it earlier.
    POLL_INTERVAL_SECONDS: float = 1.0
    #: Wake workers with LISTEN/NOTIFY. Turn off behind PgBouncer in transaction mode.
    LISTEN_NOTIFY: bool = True
    #: Run enqueue's INSERT as a server-side prepared statement. Turn off behind PgBouncer older
    #: than 1.21 in transaction mode (1.21+ with ``max_prepared_statements`` handles them). The
    #: worker's statements are never prepared (see ``operations``).
    PREPARED_STATEMENTS: bool = True
    #: Retry policy: delay = min(cap, base * factor ** (attempt - 1)), minus up to jitter * delay.
    RETRY_BASE_SECONDS: float = 2.0
    RETRY_FACTOR: float = 2.0
    RETRY_CAP_SECONDS: float = 3600.0
    RETRY_JITTER: float = 0.5
    #: Keep successful jobs this many seconds (status ``successful``); 0 deletes them at once.
    KEEP_SUCCEEDED_SECONDS: float = 0.0
    #: Seconds a worker waits for running jobs after SIGTERM/SIGINT before it gives up on them.
    SHUTDOWN_GRACE_SECONDS: float = 30.0
    #: Largest accepted JSON payload (args + kwargs), in bytes.
    MAX_PAYLOAD_BYTES: int = 1_048_576
    #: Longest error text (message + traceback) kept per attempt, in characters.
    MAX_ERROR_CHARS: int = 20_000
    #: Modules imported at start-up besides every installed app's ``jobs`` module.
    JOB_MODULES: tuple[str, ...] = ()
    #: Argument keys whose values are shown as ``'********'`` in the admin and logs.
    REDACT_KEYS: tuple[str, ...] = ()


DEFAULTS = Config()

_TYPES: dict[str, tuple[type, ...]] = {
    "DATABASE": (str,),
    "DEFAULT_QUEUE": (str,),
    "DEFAULT_MAX_ATTEMPTS": (int,),
    "DEFAULT_ATOMIC": (bool,),
    "LEASE_SECONDS": (int, float),
    "HEARTBEAT_SECONDS": (int, float),
    "RESCUE_INTERVAL_SECONDS": (int, float),
    "POLL_INTERVAL_SECONDS": (int, float),
    "LISTEN_NOTIFY": (bool,),
    "PREPARED_STATEMENTS": (bool,),
    "RETRY_BASE_SECONDS": (int, float),
    "RETRY_FACTOR": (int, float),
    "RETRY_CAP_SECONDS": (int, float),
    "RETRY_JITTER": (int, float),
    "KEEP_SUCCEEDED_SECONDS": (int, float),
    "SHUTDOWN_GRACE_SECONDS": (int, float),
    "MAX_PAYLOAD_BYTES": (int,),
    "MAX_ERROR_CHARS": (int,),
    "JOB_MODULES": (list, tuple),
    "REDACT_KEYS": (list, tuple),
}


#: Keys holding durations. Each is bounded by ``MAX_SECONDS`` so that ``now() + value`` stays a
#: valid PostgreSQL timestamp (a bigger one would fail inside the worker, not here).
SECONDS_KEYS = (
    "LEASE_SECONDS",
    "HEARTBEAT_SECONDS",
    "RESCUE_INTERVAL_SECONDS",
    "POLL_INTERVAL_SECONDS",
    "RETRY_BASE_SECONDS",
    "RETRY_CAP_SECONDS",
    "KEEP_SUCCEEDED_SECONDS",
    "SHUTDOWN_GRACE_SECONDS",
)


class ConfigError(ValueError):
    """``settings.PGJOBS`` holds an unknown key or a value of the wrong type or range."""


def validate(raw: dict[str, Any]) -> list[str]:
    """Return one human-readable problem per bad key of ``raw`` (empty when all is well)."""
    problems = []
    known = {f.name for f in fields(Config)}
    for key, value in raw.items():
        if key not in known:
            problems.append(f"unknown key {key!r} (known keys: {', '.join(sorted(known))})")
            continue
        types = _TYPES[key]
        if isinstance(value, bool) and bool not in types:
            problems.append(f"{key} must be a number, not {value!r}")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{key} must be a finite number, not {value!r}")
        elif not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            problems.append(f"{key} must be {names}, not {type(value).__name__}")
    if problems:
        return problems
    merged = {**{f.name: getattr(DEFAULTS, f.name) for f in fields(Config)}, **raw}
    positive = (
        "LEASE_SECONDS",
        "HEARTBEAT_SECONDS",
        "RESCUE_INTERVAL_SECONDS",
        "POLL_INTERVAL_SECONDS",
        "RETRY_FACTOR",
        "MAX_PAYLOAD_BYTES",
        "MAX_ERROR_CHARS",
        "DEFAULT_MAX_ATTEMPTS",
    )
    for key in positive:
        if merged[key] <= 0:
            problems.append(f"{key} must be greater than 0, not {merged[key]!r}")
    for key in (
        "RETRY_BASE_SECONDS",
        "RETRY_CAP_SECONDS",
        "KEEP_SUCCEEDED_SECONDS",
        "SHUTDOWN_GRACE_SECONDS",
    ):
        if merged[key] < 0:
            problems.append(f"{key} must be 0 or more, not {merged[key]!r}")
    for key in SECONDS_KEYS:
        if merged[key] > MAX_SECONDS:
            problems.append(
                f"{key} must be at most {MAX_SECONDS:,} seconds (10 years), not {merged[key]!r}"
            )
    if merged["RETRY_FACTOR"] < 1:
        problems.append(
            f"RETRY_FACTOR must be 1 or more (delays never shrink), not {merged['RETRY_FACTOR']!r}"
        )
    from .registry import check_queue  # registry reads settings through this module

    try:
        check_queue(merged["DEFAULT_QUEUE"])
    except ValueError as error:
        problems.append(f"DEFAULT_QUEUE: {error}")
    if not 0 <= merged["RETRY_JITTER"] <= 1:
        problems.append(f"RETRY_JITTER must be between 0 and 1, not {merged['RETRY_JITTER']!r}")
    if merged["HEARTBEAT_SECONDS"] * 2 > merged["LEASE_SECONDS"]:
        problems.append(
            "HEARTBEAT_SECONDS must be at most half of LEASE_SECONDS so one late heartbeat "
            f"does not lose the lease (got {merged['HEARTBEAT_SECONDS']} and "
            f"{merged['LEASE_SECONDS']})"
        )
    return problems


def raw_settings() -> dict[str, Any]:
    raw = getattr(settings, "PGJOBS", {}) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"settings.PGJOBS must be a dict, not {type(raw).__name__}")
    return raw


@functools.cache
def get_config() -> Config:
    """The validated configuration. Raises ``ConfigError`` when ``settings.PGJOBS`` is invalid."""
    raw = raw_settings()
    problems = validate(raw)
    if problems:
        raise ConfigError("settings.PGJOBS: " + "; ".join(problems))
    values = dict(raw)
    for key in ("JOB_MODULES", "REDACT_KEYS"):
        if key in values:
            values[key] = tuple(values[key])
    return Config(**values)


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting in ("PGJOBS", "DATABASES"):
        get_config.cache_clear()
