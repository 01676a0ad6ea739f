"""What a publisher is handed, and the two ways it says it could not publish."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class Message:
    """One outbox event as the broker gets it. ``id`` is the event's id: the AMQP
    ``message_id`` and the NATS ``Nats-Msg-Id``, what consumers de-duplicate on."""

    id: int
    topic: str
    key: str | None
    body: bytes  # the payload's JSON text, UTF-8
    headers: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None

    @property
    def message_id(self) -> str:
        return str(self.id)

    def payload(self) -> Any:
        return json.loads(self.body)


class BrokerUnavailable(Exception):
    """The broker could not be reached or did not answer in time: the event is tried again
    after a backoff (nothing is lost). Any exception a publisher raises but ``BrokerRefused``
    counts as this."""


class BrokerRefused(Exception):
    """The broker answered and refused this message (unroutable, no stream for the subject,
    negatively acknowledged): the event is dead-lettered with this error and the key's next
    event goes on."""


class Publisher(Protocol):
    """Sends a batch and returns once the broker has answered for each message (publisher
    confirm, JetStream ack): one outcome per message, in order: None (confirmed),
    ``BrokerRefused``, or any other exception (unavailable: tried again later). A batch never
    holds two messages of one key, so they may all be in flight at once."""

    def publish_batch(self, messages: Sequence[Message]) -> list[BaseException | None]: ...

    def close(self) -> None: ...
