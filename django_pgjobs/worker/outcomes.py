"""What an executor or the listener tells the dispatcher (through the events queue), the
exceptions that end an atomic job, and the counts the worker logs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..operations import ClaimedJob

logger = logging.getLogger("django_pgjobs.worker")


class LeaseLost(Exception):
    """An atomic job finished but its claim token no longer matched: rolled back."""


class RolledBack(Exception):
    """An atomic job marked its transaction for rollback: its completion cannot commit."""


class ConnectionClosedByJob(Exception):
    """An atomic job closed its database connection: its transaction was rolled back."""


class TransactionLeftOpen(Exception):
    """A job returned with its connection inside a transaction: its writes were rolled back."""


# Stored errors name their type by module: keep the names they had before the package split.
for _exception in (LeaseLost, RolledBack, ConnectionClosedByJob, TransactionLeftOpen):
    _exception.__module__ = "django_pgjobs.worker"


@dataclass
class Succeeded:
    job: ClaimedJob
    duration: float
    acked: bool = False  # atomic jobs complete in their own transaction
    result: str | None = None  # the return value as JSON, for a job that keeps it


@dataclass
class Failed:
    job: ClaimedJob
    error: BaseException
    duration: float


@dataclass
class LostLease:
    job: ClaimedJob


@dataclass
class HandBack:
    """The job's first statement met a connection that had died while idle: not its fault."""

    job: ClaimedJob
    error: BaseException


WAKE = object()  # the listener saw a notification, or a stop was requested


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


def send(signal_obj, sender, **kwargs) -> None:
    """Send a ``django_pgjobs.signals`` signal; a failing receiver never stops the worker."""
    try:
        signal_obj.send_robust(sender=sender, **kwargs)
    except Exception:  # noqa: BLE001
        logger.exception("signal receiver failed")


def one_line(value) -> str:
    text = str(value).strip().splitlines()
    return (text[0] if text else "")[:300]
