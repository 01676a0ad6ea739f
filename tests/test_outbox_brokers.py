"""The outbox against the real brokers (RabbitMQ at 127.0.0.1:5672, NATS with JetStream at
127.0.0.1:4222): rollback, a relay killed between confirm and delete, a broker away for 30 s,
per-key order across relays; and docs/howto/outbox.md's producer and consumer."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connections, transaction
from helpers import wait_until
from outbox_support import (
    AMQP_URL,
    NATS_URL,
    nats_messages,
    nats_stream,
    rabbit_depth,
    rabbit_messages,
    rabbit_queue,
)
from tcp_proxy import TcpProxy

from django_pgjobs.models import OutboxEvent, OutboxKey
from django_pgjobs.outbox import publish
from django_pgjobs.outbox.messages import BrokerRefused, Message
from django_pgjobs.outbox.publishers import build_publisher
from testproject.demo.models import Counter
from testproject.handlers.outbox import handle_order_placed, place_order

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rolled_back_transaction_publishes_nothing_to_rabbitmq(start_relay):
    with rabbit_queue() as queue:
        relay = start_relay("--publisher", AMQP_URL)
        with pytest.raises(RuntimeError), transaction.atomic():
            publish(queue, {"n": "rolled back"}, key="k")
            raise RuntimeError("the change failed")
        committed = publish(queue, {"n": "committed"}, key="k")
        received = rabbit_messages(queue, lambda got: len(got) >= 1)
        wait_until(lambda: not OutboxEvent.objects.exists())
        assert [m.message_id for m in received] == [str(committed)]
        assert received[0].body == b'{"n": "committed"}'
        assert rabbit_depth(queue) == 0
        assert relay.popen.poll() is None


def test_a_rolled_back_transaction_publishes_nothing_to_nats_and_a_resend_is_deduplicated(
    start_relay,
):
    with nats_stream() as prefix:
        with pytest.raises(RuntimeError), transaction.atomic():
            publish(f"{prefix}.orders", {"n": 1})
            raise RuntimeError("the change failed")
        event_id = publish(f"{prefix}.orders", {"n": 2}, key="order:7")
        start_relay("--publisher", NATS_URL, "--burst").wait(60)
        assert not OutboxEvent.objects.exists()
        # the same event id published again (a relay killed before its delete): JetStream drops it
        OutboxEvent.objects.create(
            id=event_id, topic=f"{prefix}.orders", key="order:7", payload={"n": 2}
        )
        OutboxKey.objects.get_or_create(key="order:7")  # as publish() leaves it
        start_relay("--publisher", NATS_URL, "--burst").wait(60)
        assert not OutboxEvent.objects.exists()  # sent again, and acknowledged
        messages = nats_messages(prefix)
        assert [(m.message_id, m.key, m.body) for m in messages] == [
            (str(event_id), "order:7", b'{"n": 2}')
        ]


def test_a_relay_killed_between_confirm_and_delete_sends_again_and_the_consumer_drops_it(
    start_relay, tmp_path
):
    Counter.objects.create(name="revenue", value=0)
    hang_file = tmp_path / "published"
    with rabbit_queue() as queue:
        event_id = place_order("A-1", 30)
        OutboxEvent.objects.filter(id=event_id).update(topic=queue)
        env = {
            "PGJOBS_TEST_AMQP_URL": AMQP_URL,
            "PGJOBS_TEST_HANG_FILE": str(hang_file),
            "PGJOBS_OUTBOX_LEASE_SECONDS": "1",
        }
        hanging = start_relay(
            "--publisher", "testproject.outbox_publishers.hang_after_publish", env=env
        )
        wait_until(hang_file.exists, timeout=60)
        hanging.popen.send_signal(signal.SIGKILL)
        hanging.wait(10)
        assert OutboxEvent.objects.filter(id=event_id).exists()  # confirmed, never marked

        start_relay("--publisher", AMQP_URL, env={"PGJOBS_OUTBOX_LEASE_SECONDS": "1"})
        wait_until(lambda: not OutboxEvent.objects.exists())
        received = rabbit_messages(queue, lambda got: len(got) >= 2)
    assert [m.message_id for m in received] == [str(event_id)] * 2
    handled = [handle_order_placed(m.message_id, m.body) for m in received]
    assert handled == [True, False]
    assert Counter.objects.get(name="revenue").value == 30


@pytest.mark.long
def test_a_broker_unreachable_for_30_seconds_loses_nothing_and_the_backlog_drains_after(
    start_relay,
):
    """Up to a minute: 30 s of outage, then the backlog drains."""
    with rabbit_queue() as queue:
        proxy = TcpProxy(AMQP_URL)
        try:
            start_relay("--publisher", proxy.url)
            before = [publish(queue, {"n": n}, key=f"k{n % 5}") for n in range(20)]
            rabbit_messages(queue, lambda got: len(got) >= 20)
            proxy.refuse()
            down_at = time.monotonic()
            during = [publish(queue, {"n": n}, key=f"k{n % 5}") for n in range(20, 220)]
            # the relay has tried and failed (events given back with their error)
            wait_until(lambda: OutboxEvent.objects.filter(attempts__gt=0).exists())
            time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))  # the outage's length
            assert OutboxEvent.objects.count() == 200
            proxy.restore()
            wait_until(lambda: not OutboxEvent.objects.exists(), timeout=60)
            received = rabbit_messages(queue, lambda got: len(got) >= 200)
        finally:
            proxy.close()
    assert {int(m.message_id) for m in received} == set(during)
    assert set(before).isdisjoint(int(m.message_id) for m in received)


def _publish_in_transactions(keys: list[str], events: int, errors: list) -> None:
    try:
        for _ in range(0, events, 5):
            with transaction.atomic():
                # keys in one order in every transaction: two transactions never wait on each
                # other's key rows in opposite orders (docs/howto/outbox.md)
                for key in sorted(random.choices(keys, k=5)):
                    publish(QUEUE_OF_ORDER_TEST[0], {"key": key}, key=key)
    except Exception as error:  # pragma: no cover - reported by the test
        errors.append(error)
    finally:
        connections.close_all()


QUEUE_OF_ORDER_TEST: list[str] = []


@pytest.mark.long
def test_per_key_order_holds_with_4_relays_over_10000_events_and_50_keys(start_relay):
    """About 20 s: 10,000 events written by 4 threads in transactions of 5 while 4 relays
    publish them; each key's message ids must arrive in increasing order (commit order)."""
    keys = [f"key-{n}" for n in range(50)]
    with rabbit_queue() as queue:
        QUEUE_OF_ORDER_TEST[:] = [queue]
        relays = [start_relay("--publisher", AMQP_URL) for _ in range(4)]
        errors: list = []
        producers = [
            threading.Thread(target=_publish_in_transactions, args=(keys, 2500, errors))
            for _ in range(4)
        ]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join()
        assert not errors
        received = rabbit_messages(
            queue, lambda got: len({m.message_id for m in got}) >= 10_000, timeout=240
        )
        wait_until(lambda: not OutboxEvent.objects.exists())
        assert all(relay.popen.poll() is None for relay in relays)
    last: dict[str, int] = {}
    for message in received:
        event_id = int(message.message_id)
        assert event_id > last.get(message.key, 0), f"{message.key}: {event_id} after {last}"
        last[message.key] = event_id
    assert len(last) == 50
    assert all(Path(relay.log).read_text().count("Traceback") == 0 for relay in relays)


def test_runjobs_relays_the_outbox_when_a_publisher_is_set(start_worker):
    with rabbit_queue() as queue:
        worker = start_worker(env={"PGJOBS_OUTBOX_PUBLISHER": AMQP_URL})
        event_id = publish(queue, {"n": 1}, key="k")
        received = rabbit_messages(queue, lambda got: len(got) >= 1)
        wait_until(lambda: not OutboxEvent.objects.exists())
        assert [m.message_id for m in received] == [str(event_id)]
        assert worker.popen.poll() is None
        worker.signal(signal.SIGTERM)  # its broker connection closed, not dropped
        assert worker.wait(30) == 0, worker.output()
        assert "Event loop is closed" not in worker.output(), worker.output()
        assert "was never awaited" not in worker.output(), worker.output()


def test_pgjobs_relay_stops_on_sigterm_and_refuses_to_start_without_a_publisher(start_relay):
    relay = start_relay("--publisher", NATS_URL)
    wait_until(lambda: "publishing the outbox to nats://" in relay.output(), timeout=60)
    relay.signal(signal.SIGTERM)
    assert relay.wait(30) == 0
    assert start_relay().wait(60) != 0  # no --publisher and no OUTBOX_PUBLISHER


def test_messages_a_broker_can_never_take_are_refused_and_their_batch_is_sent():
    """Refused (dead-lettered), not retried for ever: a message over the NATS server's
    max_payload (sent, the server dropped the connection and every message of the batch, at
    every try), a subject or a header NATS cannot send, a routing key longer than AMQP's 255
    bytes. The other messages of the batch go through."""
    with nats_stream() as prefix:
        nats = build_publisher(NATS_URL)
        try:
            too_big = b'"' + b"a" * (1024 * 1024) + b'"'
            outcomes = nats.publish_batch([
                Message(1, f"{prefix}.big", "k1", too_big),
                Message(2, f"{prefix}.a b", "k2", b"{}"),
                Message(3, f"{prefix}.ok", "k3", b"{}", headers={"bad name": "v"}),
                Message(4, f"{prefix}.ok", "k4", b'{"n": 4}'),
            ])  # fmt: skip
        finally:
            nats.close()
        assert [type(o).__name__ for o in outcomes] == ["BrokerRefused"] * 3 + ["NoneType"]
        assert "max_payload" in str(outcomes[0])
        assert [m.body for m in nats_messages(prefix)] == [b'{"n": 4}']
    with rabbit_queue() as queue:
        rabbit = build_publisher(AMQP_URL)
        try:
            outcomes = rabbit.publish_batch([
                Message(5, "é" * 200, "k5", b"{}"), Message(6, queue, "k6", b'{"n": 6}')
            ])  # fmt: skip
        finally:
            rabbit.close()
        assert isinstance(outcomes[0], BrokerRefused) and "255" in str(outcomes[0])
        assert outcomes[1] is None
        assert [m.body for m in rabbit_messages(queue, lambda got: len(got) >= 1)] == [b'{"n": 6}']


def test_an_unreachable_nats_server_fails_at_once_saying_why():
    """nats-py read max_reconnect_attempts=0 as "for ever": each try took the whole broker
    timeout (10 s), printing a traceback a try, and stored an empty TimeoutError."""
    publisher = build_publisher("nats://127.0.0.1:4223")  # nothing listens there
    started = time.monotonic()
    try:
        (outcome,) = publisher.publish_batch([Message(1, "t", None, b"{}")])
    finally:
        publisher.close()
    assert time.monotonic() - started < 3
    assert "cannot connect to the NATS server" in str(outcome) and "Connect" in str(outcome)
