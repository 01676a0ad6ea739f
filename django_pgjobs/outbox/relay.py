"""The relay: claims outbox events, publishes them, deletes the confirmed ones.

``OutboxRelay`` is a maintenance unit (``worker/maintenance.py``): built from ``(db, config,
publisher)``, ``run_once()`` relays what is ready and returns its counts. ``runjobs`` runs it
between claims when ``OUTBOX_PUBLISHER`` is set; ``manage.py pgjobs_relay`` runs it alone, for
relays scaled apart from the workers. Any number of relays share the table:

- a batch is claimed in one statement (``outbox_claim``) with a lease, so relays never block
  each other; only the oldest event left of each key is claimable, so a key never has two
  events in flight and goes out in commit order, while the other keys go on;
- a batch's messages are published together (at most one per key) and each is confirmed; the
  confirmed events are deleted in one statement at the batch's end. A relay killed between a confirm and that delete leaves
  its events to be claimed again when the lease runs out: delivery is at least once, and every
  message carries the event id for the consumer (``consume_once``) or JetStream to drop the
  duplicate;
- a broker that cannot be reached: the batch's unsent events are given back with a backoff
  (``min(cap, base * 2 ** failures)``) and the relay waits as long before its next run; nothing
  is lost. A message the broker refuses is dead-lettered (``pgjobs_outbox_deadletter``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

from django.db import OperationalError, transaction

from .. import db
from ..conf import get_config
from ..sql import query
from ..worker.maintenance import MaintenanceUnit
from .messages import BrokerRefused, Message, Publisher
from .publishers import build_publisher

logger = logging.getLogger("django_pgjobs.outbox")


@dataclass(frozen=True)
class RelayConfig:
    batch_size: int = 100  # OUTBOX_BATCH_SIZE
    lease_seconds: float = 60.0  # OUTBOX_LEASE_SECONDS: a dead relay's events come back after it
    interval_seconds: float = 1.0  # OUTBOX_POLL_SECONDS: between runs once the backlog is empty
    retry_base_seconds: float = 1.0
    retry_cap_seconds: float = 60.0  # OUTBOX_RETRY_CAP_SECONDS
    budget_seconds: float = 2.0  # longest run inside runjobs (the loop's other units wait)
    prune_keys_limit: int = 1000  # key rows without events deleted per prune
    prune_keys_seconds: float = 60.0  # between prunes (when the outbox is empty)


@dataclass(frozen=True)
class RelayCounts:
    published: int = 0
    retried: int = 0  # events given back: the broker was unreachable
    dead_lettered: int = 0  # events the broker refused

    def __add__(self, other: RelayCounts) -> RelayCounts:
        return RelayCounts(
            self.published + other.published,
            self.retried + other.retried,
            self.dead_lettered + other.dead_lettered,
        )


def _message(row: dict) -> Message:
    return Message(
        id=row["id"],
        topic=row["topic"],
        key=row["key"],
        body=row["body"].encode(),
        headers=json.loads(row["header_text"]),
        created_at=row["created_at"],
    )


class OutboxRelay(MaintenanceUnit):
    """Relays the outbox: see the module docstring. ``db`` is a ``DispatcherDatabase`` (or
    anything with ``connection()``)."""

    def __init__(self, db, config: RelayConfig, publisher: Publisher) -> None:
        self.db, self.config, self.publisher = db, config, publisher
        self.failures = 0  # runs in a row that found the broker unreachable
        self.next_prune = 0.0
        super().__init__()

    def first_delay(self) -> float:
        return 0.0

    def interval(self) -> float:
        if self.failures:
            return self.backoff()
        return self.config.interval_seconds

    def backoff(self) -> float:
        config = self.config
        return min(config.retry_cap_seconds, config.retry_base_seconds * 2 ** (self.failures - 1))

    def run_once(self) -> RelayCounts:
        """Relays batches until none is left to claim, the broker fails, or the time budget is
        spent; returns what it did."""
        total = RelayCounts()
        ends_at = time.monotonic() + self.config.budget_seconds
        while True:
            counts, claimed = self.relay_batch()
            total += counts
            if counts.retried or not claimed or time.monotonic() > ends_at:
                break
        if not claimed and time.monotonic() >= self.next_prune:
            self.next_prune = time.monotonic() + self.config.prune_keys_seconds
            self.prune_keys()
        return total

    def prune_keys(self) -> int:
        """Deletes key rows no event uses (``outbox_prune_keys`` says why REPEATABLE READ); a
        conflict with a publisher leaves them to the next prune. Returns how many it deleted."""
        connection = self.db.connection()
        try:
            with transaction.atomic(using=connection.alias):
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    cursor.execute(
                        query("outbox_prune_keys"), {"limit": self.config.prune_keys_limit}
                    )
                    return cursor.rowcount
        except OperationalError:  # could not serialize: a publisher used one of the keys
            return 0

    def relay_batch(self) -> tuple[RelayCounts, int]:
        """Claims one batch and publishes it; returns the counts and how many it claimed."""
        token = str(uuid.uuid4())
        connection = self.db.connection()
        rows = db.execute(
            connection,
            "outbox_claim",
            {"limit": self.config.batch_size, "lease": self.config.lease_seconds, "token": token},
        )
        messages = [_message(row) for row in rows]
        try:
            outcomes = self.publisher.publish_batch(messages) if messages else []
        except Exception as raised:  # it must return outcomes; one that raises: unavailable
            logger.exception("the outbox publisher raised instead of returning outcomes")
            outcomes = self._outcomes_after(raised, messages)
        published = [m.id for m, outcome in zip(messages, outcomes, strict=True) if outcome is None]
        self._mark_published(connection, published, token)
        refused = [
            (m, o) for m, o in zip(messages, outcomes, strict=True) if isinstance(o, BrokerRefused)
        ]
        for message, error in refused:
            logger.error("outbox event #%s dead-lettered: %s", message.id, error)
            db.execute(
                connection,
                "outbox_dead_letter",
                {"id": message.id, "token": token, "error": str(error)},
            )
        failed = [
            (m, o)
            for m, o in zip(messages, outcomes, strict=True)
            if o is not None and not isinstance(o, BrokerRefused)
        ]
        counts = RelayCounts(len(published), 0, len(refused))
        if failed:
            return self._give_back(connection, failed, token, counts), len(rows)
        self.failures = 0
        return counts, len(rows)

    def _outcomes_after(self, raised: Exception, messages: list[Message]) -> list:
        """The outcomes of a batch whose ``publish_batch`` raised ``raised``: unavailable for
        every message, unless it is ``BrokerRefused``. That says a message was refused, not
        which: dead-lettering them all would lose the good ones, retrying them all would never
        end (the same batch, refused again). So each is published again alone, in order, and
        gets its own outcome. (A batch holds one event of a key at most: outbox_claim.)"""
        if not isinstance(raised, BrokerRefused) or len(messages) == 1:
            return [raised] * len(messages)
        outcomes = []
        for message in messages:
            try:
                (outcome,) = self.publisher.publish_batch([message])
            except Exception as alone:  # raised for this message alone: its own outcome
                outcome = alone
            outcomes.append(outcome)
        return outcomes

    def _mark_published(self, connection, ids: list[int], token: str) -> None:
        if ids:
            db.execute(connection, "outbox_published", {"ids": ids, "token": token})

    def _give_back(self, connection, failed, token, done: RelayCounts) -> RelayCounts:
        self.failures += 1
        delay = self.backoff()
        error = failed[0][1]
        text = f"{type(error).__name__}: {error}"[:2000]
        logger.warning(
            "outbox: the broker is unavailable (%s); %d event(s) tried again in %.1fs",
            text,
            len(failed),
            delay,
        )
        ids = [message.id for message, _ in failed]
        db.execute(
            connection, "outbox_retry", {"ids": ids, "token": token, "error": text, "delay": delay}
        )
        return done + RelayCounts(retried=len(ids))

    def close(self) -> None:
        self.publisher.close()


def relay_config_from_settings(**overrides) -> RelayConfig:
    config = get_config()
    values = {
        "batch_size": config.OUTBOX_BATCH_SIZE,
        "lease_seconds": config.OUTBOX_LEASE_SECONDS,
        "interval_seconds": config.OUTBOX_POLL_SECONDS,
        "retry_cap_seconds": config.OUTBOX_RETRY_CAP_SECONDS,
    }
    return RelayConfig(**{**values, **overrides})


def relay_from_settings(db, publisher: str, **overrides) -> OutboxRelay:
    """The relay the settings describe, publishing through ``publisher`` (a setting's value)."""
    return OutboxRelay(db, relay_config_from_settings(**overrides), build_publisher(publisher))
