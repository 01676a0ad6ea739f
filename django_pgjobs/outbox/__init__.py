"""The transactional outbox: ``publish()`` an event in the transaction of the change it
announces; a relay (``runjobs`` with ``OUTBOX_PUBLISHER``, or ``manage.py pgjobs_relay``)
sends it to a broker afterwards, in order per key; ``consume_once()`` drops the duplicates on the
consumer's side. docs/howto/outbox.md.

Parts: ``models`` (tables), ``publishing`` (``publish``), ``relay`` (claim, send, mark),
``publishers`` (RabbitMQ, NATS JetStream, a plain callable), ``consumers`` (``consume_once``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["publish", "consume_once", "BrokerRefused", "BrokerUnavailable", "Message"]

_LAZY = {
    "publish": "publishing",
    "consume_once": "consumers",
    "BrokerRefused": "messages",
    "BrokerUnavailable": "messages",
    "Message": "messages",
}


def __getattr__(name: str) -> Any:
    # Lazy: django_pgjobs.models imports .models of this package before the app registry is ready.
    from importlib import import_module

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_pgjobs.outbox' has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
