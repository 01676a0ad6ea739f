"""What an executor or the listener tells the dispatcher (through its ``Inbox``), the
exceptions that end an atomic job, and the counts the worker logs."""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from dataclasses import dataclass, field

from ..operations import ClaimedJob

logger = logging.getLogger("django_pgjobs.worker")


# stored_error_type: the name rows hold for each (errors.stored_type)
class LeaseLost(Exception):
    """An atomic job finished but its claim token no longer matched: rolled back."""

    stored_error_type = "django_pgjobs.worker.LeaseLost"


class RolledBack(Exception):
    """An atomic job marked its transaction for rollback: its completion cannot commit."""

    stored_error_type = "django_pgjobs.worker.RolledBack"


class ConnectionClosedByJob(Exception):
    """An atomic job closed its database connection: its transaction was rolled back."""

    stored_error_type = "django_pgjobs.worker.ConnectionClosedByJob"


class TransactionLeftOpen(Exception):
    """A job returned with its connection inside a transaction: its writes were rolled back."""

    stored_error_type = "django_pgjobs.worker.TransactionLeftOpen"


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
class Superseded:
    """An atomic job's completion found its claim token replaced (its lease had expired and the
    job was rescued): its transaction rolled back; the job's new holder decides."""

    job: ClaimedJob


@dataclass
class HandBack:
    """The job's first statement met a connection that had died while idle: not its fault."""

    job: ClaimedJob
    error: BaseException


WAKE = object()  # the listener saw a notification, or a stop was requested


class Inbox:
    """Any thread to the dispatcher: outcomes, abort notices and wake-ups, in arrival order.

    ``wake()`` (jobs may be ready: claim without waiting for the poll) puts one ``WAKE`` however
    often it is called before the dispatcher takes it (``take_wake()``)."""

    def __init__(self) -> None:
        self.queue: queue_module.Queue = queue_module.Queue()
        self._wake_pending = threading.Event()
        self._flow_pending = threading.Event()

    def put(self, item) -> None:
        self.queue.put(item)

    def wake(self) -> None:
        if not self._wake_pending.is_set():
            self._wake_pending.set()
            self.queue.put(WAKE)

    def wake_flow(self) -> None:
        """A job with a flow key was enqueued: the flow claim is due too (``flow_claims``)."""
        self._flow_pending.set()
        self.wake()

    def take_flow_wake(self) -> bool:
        """(Dispatcher.) Whether a flow wake-up was pending; it is not any more."""
        woken = self._flow_pending.is_set()
        self._flow_pending.clear()
        return woken

    def woken(self) -> bool:
        """A wake-up is pending."""
        return self._wake_pending.is_set()

    def take_wake(self) -> bool:
        """(Dispatcher, claiming.) Whether a wake-up was pending; it is not any more."""
        woken = self._wake_pending.is_set()
        self._wake_pending.clear()
        return woken

    def get(self, block_for: float):
        """The next item, waiting up to ``block_for`` seconds (0: not at all); ``Empty``."""
        if block_for > 0:
            return self.queue.get(timeout=block_for)
        return self.queue.get_nowait()


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
