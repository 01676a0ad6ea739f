"""The transactional outbox: ``publish()`` an event in the transaction of the change it
announces; a relay (``runjobs`` with ``OUTBOX_PUBLISHER``, or ``manage.py pgjobs_relay``)
sends it to a broker afterwards, in order per key; ``consume_once()`` drops the duplicates on the
consumer's side. docs/howto/outbox.md.

Parts: ``models`` (tables), ``publishing`` (``publish``), ``relay`` (claim, send, mark),
``publishers`` (RabbitMQ, NATS JetStream, a plain callable), ``consumers`` (``consume_once``).
"""

from __future__ import annotations

from .consumers import consume_once
from .messages import BrokerRefused, BrokerUnavailable, Message
from .publishing import publish

__all__ = ["publish", "consume_once", "BrokerRefused", "BrokerUnavailable", "Message"]
