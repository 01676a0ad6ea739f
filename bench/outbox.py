"""The outbox relay's throughput per broker: ``python -m bench.outbox``.

Needs RabbitMQ (``--amqp``, default amqp://guest:guest@127.0.0.1:5672/) and NATS with JetStream
(``--nats``, default nats://127.0.0.1:4222), and the ``outbox`` and ``test`` extras. Uses
``DATABASE_URL`` or starts the throwaway PostgreSQL of testproject, in a database of its own
(``pgjobs_outbox_bench``, made afresh). For each broker and each shape of keys it writes
``--events`` events in one statement, then times one relay (``OutboxRelay``, in this process,
default settings) publishing them all; one line per run. docs/benchmarks.md keeps the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import django

DATABASE = "pgjobs_outbox_bench"
SHAPES = {"no key": 0, "50 keys": 50, "1,000 keys": 1000}


def _fresh_database() -> None:
    import psycopg
    from django.core.management import call_command
    from django.db import connection

    settings = connection.settings_dict
    dsn = dict(
        host=settings["HOST"], port=settings["PORT"] or None, user=settings["USER"] or None,
        password=settings["PASSWORD"] or None, dbname=settings["NAME"],
    )  # fmt: skip
    with psycopg.connect(**dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    connection.close()
    settings["NAME"] = DATABASE
    call_command("migrate", verbosity=0)


def _write_events(topic: str, events: int, keys: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pgjobs_outbox_event, pgjobs_outbox_key")
        cursor.execute(
            "INSERT INTO pgjobs_outbox_event (topic, key, payload, headers, created_at, "
            "available_at, attempts, last_error) SELECT %s, 'key-' || (g %% NULLIF(%s, 0)), "
            "jsonb_build_object('n', g, 'text', 'an event of about a hundred bytes of JSON...'), "
            "'{}', now(), now(), 0, '' FROM generate_series(1, %s) g",
            [topic, keys, events],
        )
        cursor.execute(
            "INSERT INTO pgjobs_outbox_key (key) SELECT DISTINCT key FROM pgjobs_outbox_event "
            "WHERE key IS NOT NULL"
        )
        cursor.execute("ANALYZE pgjobs_outbox_event")
        cursor.execute("ANALYZE pgjobs_outbox_key")


def _relay_all(publisher_url: str) -> float:
    from django.db import connection

    from django_pgjobs.models import OutboxEvent
    from django_pgjobs.outbox.relay import relay_from_settings

    class Here:
        def connection(self):
            return connection

    relay = relay_from_settings(Here(), publisher_url, budget_seconds=float("inf"))
    started = time.perf_counter()
    try:
        while relay.run_once().published:
            pass
        elapsed = time.perf_counter() - started
    finally:
        relay.close()
    left = OutboxEvent.objects.count()
    if left:
        raise SystemExit(f"{left} event(s) left unpublished: is the broker up?")
    return elapsed


def _rabbit_topic(url: str, create: bool, name: str) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    if create:
        channel.queue_declare(name, durable=True)
    else:
        channel.queue_delete(name)
    connection.close()


def _nats_stream(url: str, create: bool, name: str) -> None:
    import nats
    from nats.js.api import StreamConfig

    async def run():
        client = await nats.connect(url)
        js = client.jetstream()
        if create:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        else:
            await js.delete_stream(name)
        await client.close()

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    _fresh_database()
    name = f"pgjobs-bench-{uuid.uuid4().hex[:8]}"
    brokers = [
        ("RabbitMQ", options.amqp, name, _rabbit_topic),
        ("NATS JetStream", options.nats, name.upper().replace("-", "_"), _nats_stream),
    ]
    for broker, url, topic_base, topic in brokers:
        topic(url, True, topic_base)
        try:
            for shape, keys in SHAPES.items():
                subject = topic_base if topic is _rabbit_topic else f"{topic_base}.events"
                _write_events(subject, options.events, keys)
                elapsed = _relay_all(url)
                print(
                    f"{broker:15} {shape:11} {options.events:,} events in {elapsed:.2f}s: "
                    f"{options.events / elapsed:,.0f} events/s (1 relay)",
                    flush=True,
                )
        finally:
            topic(url, False, topic_base)


if __name__ == "__main__":
    main()
