"""The built-in publishers and how the ``OUTBOX_PUBLISHER`` setting names one.

- ``amqp://`` / ``amqps://`` URL: ``RabbitMQPublisher`` (pika, AMQP 0-9-1, publisher confirms).
  ``?exchange=name`` picks the exchange (default: the default exchange, where the topic is the
  queue's name).
- ``nats://`` / ``tls://`` URL: ``NatsPublisher`` (nats-py, JetStream acknowledged publish).
- anything else: the dotted path of a publisher object (``publish(message)`` and ``close()``)
  or of a plain callable ``f(message)`` (``CallablePublisher``).

The broker clients are the ``outbox`` extra (``pip install "django-pgjobs[outbox]"``), imported
only when a publisher of theirs is built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.utils.module_loading import import_string

from .messages import BrokerRefused, Message, Publisher

#: Seconds a broker has to answer a connect or a publish before it counts as unavailable.
BROKER_TIMEOUT_SECONDS = 10.0


class CallablePublisher:
    """Any function ``f(message)`` as a publisher: returning is success; raising
    ``BrokerRefused`` dead-letters the event; any other exception retries it."""

    def __init__(self, function: Callable[[Message], object]) -> None:
        self.function = function

    def publish(self, message: Message) -> None:
        self.function(message)

    def close(self) -> None:
        pass


class RabbitMQPublisher:
    """AMQP 0-9-1 through pika's ``BlockingConnection`` with publisher confirms: ``publish``
    returns once RabbitMQ has confirmed the message (persistent, ``mandatory``: a message no
    queue takes is refused, not dropped). ``message_id`` is the event id; the key, when there is
    one, is the ``pgjobs-key`` header."""

    def __init__(self, url: str, exchange: str = "") -> None:
        self.url, self.exchange = url, exchange
        self._connection = self._channel = None

    def _open(self):
        import pika

        if self._channel is None or not self._channel.is_open:
            self.close()
            parameters = pika.URLParameters(self.url)
            parameters.socket_timeout = BROKER_TIMEOUT_SECONDS
            parameters.blocked_connection_timeout = BROKER_TIMEOUT_SECONDS
            parameters.connection_attempts = 1
            self._connection = pika.BlockingConnection(parameters)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def publish(self, message: Message) -> None:
        import pika
        from pika.exceptions import NackError, UnroutableError

        headers = dict(message.headers)
        if message.key is not None:
            headers["pgjobs-key"] = message.key
        properties = pika.BasicProperties(
            message_id=message.message_id,
            content_type="application/json",
            delivery_mode=2,
            headers=headers,
        )
        try:
            self._open().basic_publish(
                self.exchange, message.topic, message.body, properties, mandatory=True
            )
        except (NackError, UnroutableError) as error:
            raise BrokerRefused(f"RabbitMQ refused the message: {error!r}") from None
        except Exception:
            self.close()  # reconnect on the next publish
            raise

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # noqa: S110 - a dead connection has nothing left to close
                pass


class NatsPublisher:
    """NATS JetStream through nats-py: ``publish`` returns once the stream has acknowledged the
    message. ``Nats-Msg-Id`` is the event id, so JetStream drops a re-publish within the
    stream's duplicate window. nats-py is asyncio-only: the publisher runs its own event loop,
    used only from the relay's thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client = self._jetstream = None

    async def _open(self):
        import nats

        if self._client is None or self._client.is_closed:
            self._client = await nats.connect(
                self.url,
                connect_timeout=BROKER_TIMEOUT_SECONDS,
                allow_reconnect=False,
                max_reconnect_attempts=0,
            )
            self._jetstream = self._client.jetstream(timeout=BROKER_TIMEOUT_SECONDS)
        return self._jetstream

    async def _publish(self, message: Message) -> None:
        from nats.js.errors import BadRequestError, NoStreamResponseError, NotFoundError

        headers = {**message.headers, "Nats-Msg-Id": message.message_id}
        if message.key is not None:
            headers["Pgjobs-Key"] = message.key
        try:
            await (await self._open()).publish(message.topic, message.body, headers=headers)
        except (NoStreamResponseError, BadRequestError, NotFoundError) as error:
            raise BrokerRefused(f"JetStream refused the message: {error!r}") from None
        except Exception:
            await self._close()
            raise

    def publish(self, message: Message) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._publish(message))

    async def _close(self) -> None:
        client, self._client, self._jetstream = self._client, None, None
        if client is not None and not client.is_closed:
            try:
                await client.close()
            except Exception:  # noqa: S110 - a dead connection has nothing left to close
                pass

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self._close())
            self._loop.close()
            self._loop = None


def _amqp(url: str) -> RabbitMQPublisher:
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    exchange = "".join(value for name, value in query if name == "exchange")
    rest = urlencode([(name, value) for name, value in query if name != "exchange"])
    return RabbitMQPublisher(urlunsplit(parts._replace(query=rest)), exchange)


def build_publisher(setting: str) -> Publisher:
    """The publisher ``OUTBOX_PUBLISHER`` (or ``pgjobs_relay --publisher``) names."""
    scheme = urlsplit(setting).scheme
    if scheme in ("amqp", "amqps"):
        return _amqp(setting)
    if scheme in ("nats", "tls"):
        return NatsPublisher(setting)
    target = import_string(setting)
    if callable(getattr(target, "publish", None)):
        return target
    if callable(target):
        return CallablePublisher(target)
    raise ValueError(f"{setting!r} is neither a broker URL, a publisher nor a callable")
