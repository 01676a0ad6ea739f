"""The built-in publishers and how the ``OUTBOX_PUBLISHER`` setting names one.

- ``amqp://`` / ``amqps://`` URL: ``RabbitMQPublisher`` (aio-pika, AMQP 0-9-1, publisher confirms).
  ``?exchange=name`` picks the exchange (default: the default exchange, where the topic is the
  queue's name).
- ``nats://`` / ``tls://`` URL: ``NatsPublisher`` (nats-py, JetStream acknowledged publish).
- anything else: the dotted path of a publisher object (``publish_batch(messages)`` and
  ``close()``, as ``messages.Publisher`` says)
  or of a plain callable ``f(message)`` (``CallablePublisher``).

The broker clients are the ``outbox`` extra (``pip install "django-pgjobs[outbox]"``), imported
only when a publisher of theirs is built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from importlib import import_module
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.utils.module_loading import import_string

from .messages import BrokerRefused, Message, Publisher

#: Seconds a broker has to answer a connect or a publish before it counts as unavailable.
BROKER_TIMEOUT_SECONDS = 10.0
#: The longest AMQP short string (a routing key, a header's name), in bytes.
AMQP_SHORT_STRING_BYTES = 255


async def _close_quietly(connection) -> None:
    """Close a broker connection if it is open; a dead one has nothing left to close."""
    if connection is not None and not connection.is_closed:
        try:
            await connection.close()
        except Exception:  # noqa: S110
            pass


class CallablePublisher:
    """Any function ``f(message)`` as a publisher: returning is success; raising
    ``BrokerRefused`` dead-letters the event; any other exception retries it. Called once per
    message, one after the other."""

    def __init__(self, function: Callable[[Message], object]) -> None:
        self.function = function

    def publish_batch(self, messages: Sequence[Message]) -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        for message in messages:
            try:
                self.function(message)
            except Exception as error:
                outcomes.append(error)
            else:
                outcomes.append(None)
        return outcomes

    def close(self) -> None:
        pass


class AsyncBrokerPublisher:
    """A publisher over an asyncio client, driven from the relay's (synchronous) thread on an
    event loop of its own. A batch's messages are all in flight at once and each is confirmed
    on its own: the claim gives a batch at most one event per key, so no key has two messages
    in flight. After any failure but a refusal the connection is dropped and opened again at
    the next batch."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _connect(self) -> None:
        raise NotImplementedError

    async def _send(self, message: Message) -> None:
        """Publish one message and wait for the broker's confirm; ``BrokerRefused`` for a
        refusal."""
        raise NotImplementedError

    async def _disconnect(self) -> None:
        raise NotImplementedError

    async def _batch(self, messages: Sequence[Message]) -> list[BaseException | None]:
        try:
            await asyncio.wait_for(self._connect(), BROKER_TIMEOUT_SECONDS)
        except Exception as error:
            await self._disconnect()
            return [error] * len(messages)
        sends = (asyncio.wait_for(self._send(m), BROKER_TIMEOUT_SECONDS) for m in messages)
        outcomes = await asyncio.gather(*sends, return_exceptions=True)
        if any(o is not None and not isinstance(o, BrokerRefused) for o in outcomes):
            await self._disconnect()
        return list(outcomes)

    def publish_batch(self, messages: Sequence[Message]) -> list[BaseException | None]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._batch(messages))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self._disconnect())
            self._loop.close()
            self._loop = None


class RabbitMQPublisher(AsyncBrokerPublisher):
    """AMQP 0-9-1 through aio-pika with publisher confirms: a message counts as published once
    RabbitMQ confirmed it (persistent; ``mandatory``: a message no queue takes comes back and is
    refused, not dropped). ``message_id`` is the event id; the key, when there is one, is the
    ``pgjobs-key`` header. ``exchange``: "" is the default exchange (the topic is a queue's
    name)."""

    def __init__(self, url: str, exchange: str = "") -> None:
        super().__init__()
        self.url, self.exchange = url, exchange
        self._connection = self._exchange = None

    async def _connect(self) -> None:
        import aio_pika

        if self._connection is None or self._connection.is_closed:
            await self._disconnect()
            self._connection = await aio_pika.connect(self.url, timeout=BROKER_TIMEOUT_SECONDS)
            channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
            self._exchange = (
                await channel.get_exchange(self.exchange)
                if self.exchange
                else channel.default_exchange
            )

    async def _send(self, message: Message) -> None:
        import aio_pika
        from aio_pika.exceptions import DeliveryError

        headers = dict(message.headers)
        if message.key is not None:
            headers["pgjobs-key"] = message.key
        amqp_message = aio_pika.Message(
            message.body,
            message_id=message.message_id,
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            headers=headers,
        )
        if len(message.topic.encode()) > AMQP_SHORT_STRING_BYTES:
            raise BrokerRefused(
                f"the topic is {len(message.topic.encode())} bytes in UTF-8: an AMQP routing key "
                f"holds at most {AMQP_SHORT_STRING_BYTES}"
            )
        try:
            await self._exchange.publish(amqp_message, message.topic, mandatory=True)
        except DeliveryError as error:  # negatively acknowledged, or returned unroutable
            raise BrokerRefused(f"RabbitMQ refused the message: {error!r}") from None
        except (TypeError, ValueError) as error:  # AMQP cannot encode it (a header too long...)
            raise BrokerRefused(f"AMQP cannot send the message: {error!r}") from None

    async def _disconnect(self) -> None:
        connection, self._connection, self._exchange = self._connection, None, None
        await _close_quietly(connection)


class NatsPublisher(AsyncBrokerPublisher):
    """NATS JetStream through nats-py: a message counts as published once the stream has
    acknowledged it. ``Nats-Msg-Id`` is the event id, so JetStream drops a re-publish within
    the stream's duplicate window; the key, when there is one, is the ``Pgjobs-Key`` header."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._client = self._jetstream = None

    async def _connect(self) -> None:
        import nats

        if self._client is None or self._client.is_closed:
            await self._disconnect()
            seen: list[BaseException] = []

            async def noted(error: BaseException) -> None:  # nats-py prints a traceback each
                seen.append(error)

            try:
                self._client = await nats.connect(
                    self.url,
                    connect_timeout=BROKER_TIMEOUT_SECONDS,
                    allow_reconnect=False,
                    max_reconnect_attempts=1,  # 0 is "for ever" to nats-py's first connect
                    reconnect_time_wait=0.1,
                    error_cb=noted,
                )
            except Exception as error:
                cause = seen[-1] if seen else error
                raise ConnectionError(f"cannot connect to the NATS server: {cause!r}") from None
            self._jetstream = self._client.jetstream(timeout=BROKER_TIMEOUT_SECONDS)

    async def _send(self, message: Message) -> None:
        from nats.errors import BadHeaderError, BadSubjectError, MaxPayloadError
        from nats.js.errors import BadRequestError, NoStreamResponseError, NotFoundError

        headers = {**message.headers, "Nats-Msg-Id": message.message_id}
        if message.key is not None:
            headers["Pgjobs-Key"] = message.key
        # over the server's limit, the server would drop the connection and every message of
        # the batch with it, at every try: refused here, before it is sent
        size = len(message.body) + len(_nats_header_block(headers))
        if size > self._client.max_payload:
            raise BrokerRefused(
                f"the message is {size} bytes with its headers, over the NATS server's "
                f"max_payload of {self._client.max_payload}"
            )
        try:
            await self._jetstream.publish(message.topic, message.body, headers=headers)
        except (NoStreamResponseError, BadRequestError, NotFoundError) as error:
            raise BrokerRefused(f"JetStream refused the message: {error!r}") from None
        except (BadSubjectError, BadHeaderError, MaxPayloadError) as error:  # never sendable
            raise BrokerRefused(f"NATS cannot send the message: {error!r}") from None

    async def _disconnect(self) -> None:
        client, self._client, self._jetstream = self._client, None, None
        await _close_quietly(client)


def _nats_header_block(headers: dict[str, str]) -> bytes:
    """The header block NATS sends before a message's body (counted in its max_payload)."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


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
    if callable(getattr(target, "publish_batch", None)):
        return target
    if callable(target):
        return CallablePublisher(target)
    raise ValueError(f"{setting!r} is neither a broker URL, a publisher nor a callable")


#: The client each URL scheme's publisher imports when it first connects.
CLIENTS = {"amqp": "aio_pika", "amqps": "aio_pika", "nats": "nats", "tls": "nats"}


def publisher_problem(setting: str) -> str | None:
    """Why ``build_publisher(setting)`` would fail, or its publisher could not connect for want
    of its client (the system check pgjobs.E005); None when all is well."""
    client = CLIENTS.get(urlsplit(setting).scheme)
    try:
        if client is not None:
            import_module(client)
        else:
            build_publisher(setting)
    except ImportError as error:
        return f"{error} (the broker clients: pip install 'django-pgjobs[outbox]')"
    except ValueError as error:
        return str(error)
    return None
