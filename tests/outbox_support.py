"""The real brokers of the outbox tests (RabbitMQ at 127.0.0.1:5672, NATS with JetStream at
127.0.0.1:4222, as on CI) and relay processes (``manage.py pgjobs_relay``, the ``start_relay``
fixture: a plugin of conftest.py). The broker clients are imported when used."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from helpers import WorkerProcess, command_starter

AMQP_URL = os.environ.get("PGJOBS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
NATS_URL = os.environ.get("PGJOBS_TEST_NATS_URL", "nats://127.0.0.1:4222")


@dataclass(frozen=True)
class Received:
    message_id: str
    key: str | None
    body: bytes


@contextmanager
def rabbit_queue() -> Iterator[str]:
    """A queue of its own on the default exchange; its name is the topic to publish to."""
    import pika

    name = f"pgjobs-test-{uuid.uuid4().hex[:12]}"
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        connection.channel().queue_declare(name, durable=True)
        yield name
    finally:
        connection.channel().queue_delete(name)
        connection.close()


def rabbit_messages(queue: str, until: Callable[[list[Received]], bool], timeout: float = 60):
    """Consumes ``queue`` (acked) until ``until(received)`` holds; returns what it received."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    received: list[Received] = []
    deadline = time.monotonic() + timeout
    try:
        channel = connection.channel()
        for method, properties, body in channel.consume(
            queue, auto_ack=True, inactivity_timeout=0.2
        ):
            if method is not None:
                key = (properties.headers or {}).get("pgjobs-key")
                received.append(Received(properties.message_id, key, body))
            if until(received):
                return received
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(received)} message(s) in {timeout}s: {received[:5]}")
    finally:
        connection.close()


def rabbit_depth(queue: str) -> int:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


async def _jetstream(operation):
    import nats

    client = await nats.connect(NATS_URL)
    try:
        return await operation(client.jetstream())
    finally:
        await client.close()


@contextmanager
def nats_stream() -> Iterator[str]:
    """A JetStream stream of its own; yields the subject prefix it captures (``prefix.>``)."""
    from nats.js.api import StreamConfig

    name = f"PGJOBS_TEST_{uuid.uuid4().hex[:12].upper()}"
    prefix = f"pgjobs-test.{name.lower()}"

    async def create(js):
        await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))

    asyncio.run(_jetstream(create))
    try:
        yield prefix
    finally:
        asyncio.run(_jetstream(lambda js: js.delete_stream(name)))


def nats_messages(prefix: str) -> list[Received]:
    """Every message of the stream capturing ``prefix.>``, in stream order."""

    async def read(js):
        name = await js.find_stream_name_by_subject(f"{prefix}.>")
        info = await js.stream_info(name)
        messages = []
        for sequence in range(info.state.first_seq, info.state.last_seq + 1):
            if info.state.messages == 0:
                break
            message = await js.get_msg(name, sequence)
            headers = message.headers or {}
            messages.append(
                Received(headers.get("Nats-Msg-Id"), headers.get("Pgjobs-Key"), message.data)
            )
        return messages

    return asyncio.run(_jetstream(read))


@pytest.fixture
def start_relay(tmp_path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py pgjobs_relay`` subprocesses; all are killed at the end of the test."""
    with command_starter("pgjobs_relay", tmp_path) as start:
        yield start
