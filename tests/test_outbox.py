"""The outbox without a broker: publish() in the caller's transaction, commit order per key,
the claim (heads of keys only, relays never sharing a key), the relay's outcomes (published,
refused, unavailable), consume_once, the admin and the metrics. The real brokers:
tests/test_outbox_brokers.py."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from helpers import count, wait_until

from django_pgjobs import db
from django_pgjobs.models import OutboxDeadLetter, OutboxEvent, ProcessedEvent
from django_pgjobs.outbox import BrokerRefused, consume_once, publish
from django_pgjobs.outbox.publishers import CallablePublisher, build_publisher
from django_pgjobs.outbox.relay import OutboxRelay, RelayConfig
from django_pgjobs.payload import ArgumentsNotJSON, PayloadTooLarge

pytestmark = pytest.mark.django_db(transaction=True)


class Here:
    """The relay's database: this thread's Django connection."""

    def connection(self):
        return connection


def relay(publish_function, **config) -> OutboxRelay:
    return OutboxRelay(Here(), RelayConfig(**config), CallablePublisher(publish_function))


def claim(token: str, limit: int = 100) -> list[dict]:
    return db.execute(
        connection,
        "outbox_claim",
        {"limit": limit, "lease": 60, "token": f"00000000-0000-0000-0000-{token:0>12}"},
    )


def test_publish_commits_with_the_transaction_and_vanishes_on_rollback(other_connection):
    with transaction.atomic():
        event_id = publish("orders.placed", {"order": 1}, key="order:1", headers={"h": "v"})
        assert count(other_connection, "SELECT count(*) FROM pgjobs_outbox_event") == 0
    assert count(other_connection, "SELECT count(*) FROM pgjobs_outbox_event") == 1
    event = OutboxEvent.objects.get()
    assert (event.id, event.topic, event.key, event.payload, event.headers) == (
        event_id, "orders.placed", "order:1", {"order": 1}, {"h": "v"},
    )  # fmt: skip
    with pytest.raises(RuntimeError), transaction.atomic():
        publish("orders.placed", {"order": 2}, key="order:2")
        raise RuntimeError
    assert count(other_connection, "SELECT count(*) FROM pgjobs_outbox_event") == 1


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (("t", {"when": timezone.now()}), ArgumentsNotJSON),
        (("t", float("nan")), ArgumentsNotJSON),
        (("t", "x" * 2_000_000), PayloadTooLarge),
        (("", {}), ValueError),
        ((" t", {}), ValueError),
        (("t", {}, ""), ValueError),
        (("t", {}, "k", {"n": 1}), ArgumentsNotJSON),
    ],
)
def test_what_publish_refuses_writes_nothing(arguments, error):
    with pytest.raises(error):
        publish(*arguments)
    assert not OutboxEvent.objects.exists()


def test_a_second_transaction_on_a_key_waits_for_the_first_so_ids_follow_commit_order(
    other_connection,
):
    """Without the key row's lock, the second transaction would take a bigger id and commit
    first: id order would not be commit order, and the relay would publish out of order."""
    done: dict[str, int] = {}
    publish("t", {"by": "earlier"}, key="k")  # the key's row exists: the usual case

    def publish_in_thread(name: str, key: str) -> None:
        try:
            done[name] = publish("t", {"by": name}, key=key)
        finally:
            connection.close()

    with transaction.atomic():
        first = publish("t", {"by": "first"}, key="k")
        other_key = threading.Thread(target=publish_in_thread, args=("other", "other"))
        other_key.start()
        other_key.join(30)
        assert "other" in done  # another key is not held back
        second = threading.Thread(target=publish_in_thread, args=("second", "k"))
        second.start()
        wait_until(
            lambda: (
                count(
                    other_connection,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%pgjobs_outbox_key%%'",
                )
                == 1
            ),
            timeout=30,
        )
        assert "second" not in done
    second.join(30)
    assert done["second"] > first


def test_the_claim_takes_the_head_of_each_key_and_a_second_relay_skips_held_keys():
    ids = [publish("t", {"n": n}, key=f"k{n % 3}") for n in range(9)]
    loose = publish("t", {"n": "no key"})
    first = claim("1")
    assert sorted(row["id"] for row in first) == [*ids[:3], loose]
    assert claim("2") == []  # each key's head is held; the next events are not heads
    OutboxEvent.objects.filter(id=ids[0]).delete()  # k0's head published
    assert [row["id"] for row in claim("3")] == [ids[3]]
    OutboxEvent.objects.filter(id=ids[1]).update(claimed_until=timezone.now())  # lease ran out
    assert [row["id"] for row in claim("4")] == [ids[1]]


def test_the_relay_publishes_in_key_order_and_deletes_what_was_confirmed():
    sent = []
    ids = [publish("t", {"n": n}, key=f"k{n % 2}", headers={"n": str(n)}) for n in range(6)]
    unit = relay(sent.append)
    counts = unit.run_once()
    assert counts.published == 6 and not OutboxEvent.objects.exists()
    assert [m.id for m in sent if m.key == "k0"] == ids[0::2]
    assert [m.id for m in sent if m.key == "k1"] == ids[1::2]
    assert (sent[0].message_id, sent[0].payload(), sent[0].headers) == (
        str(ids[0]), {"n": 0}, {"n": "0"},
    )  # fmt: skip


def test_a_refused_event_is_dead_lettered_and_its_key_goes_on():
    refused = publish("t", {"n": 0}, key="k")
    after = publish("t", {"n": 1}, key="k")

    def broker(message):
        if message.id == refused:
            raise BrokerRefused("no route")

    counts = relay(broker).run_once()
    assert (counts.published, counts.dead_lettered) == (1, 1)
    dead = OutboxDeadLetter.objects.get()
    assert (dead.id, dead.payload, dead.error) == (refused, {"n": 0}, "no route")
    assert not OutboxEvent.objects.filter(id=after).exists()


def test_an_unreachable_broker_gives_events_back_with_a_growing_wait():
    event_id = publish("t", {"n": 0}, key="k")
    publish("t", {"n": 1}, key="k")

    def broker(message):
        raise ConnectionRefusedError("connection refused")

    unit = relay(broker, retry_base_seconds=1, retry_cap_seconds=4)
    before = timezone.now()
    assert unit.run_once().retried == 1
    event = OutboxEvent.objects.get(id=event_id)
    assert event.attempts == 1 and "connection refused" in event.last_error
    assert event.claimed_until is None and event.available_at >= before + timedelta(seconds=1)
    assert unit.interval() == 1
    OutboxEvent.objects.update(available_at=timezone.now())
    unit.run_once()
    assert unit.interval() == 2 and OutboxEvent.objects.count() == 2
    sent = []
    unit.publisher = CallablePublisher(sent.append)
    OutboxEvent.objects.update(available_at=timezone.now())
    unit.run_once()  # the key's head first, then the next at the next claim
    assert [m.payload()["n"] for m in sent] == [0, 1] and unit.failures == 0


class RaisingPublisher:
    """A publisher object that raises for a whole batch instead of returning outcomes (a
    natural mistake): ``raised(messages)`` says what, or None to publish them all."""

    def __init__(self, raised) -> None:
        self.raised = raised
        self.sent: list = []

    def publish_batch(self, messages):
        error = self.raised(messages)
        if error is not None:
            raise error
        self.sent.extend(messages)
        return [None] * len(messages)

    def close(self):
        pass


def test_a_publisher_that_raises_instead_of_returning_outcomes_counts_as_unavailable():
    """A publisher object must return one outcome per message; one that raised took the relay
    down with it, and runjobs with it: its events are given back."""
    event_id = publish("t", {"n": 0}, key="k")
    unit = relay(lambda message: None, retry_base_seconds=1)
    unit.publisher = RaisingPublisher(lambda messages: ConnectionError("broker gone"))
    assert unit.run_once().retried == 1
    event = OutboxEvent.objects.get(id=event_id)
    assert event.attempts == 1 and "broker gone" in event.last_error
    assert not OutboxDeadLetter.objects.exists()


def test_broker_refused_raised_for_a_batch_dead_letters_only_the_refused_event():
    """``BrokerRefused`` raised for a batch says one of its messages was refused, not which:
    each is published again alone, the refused one dead-lettered, the one the broker cannot
    take now given back, the rest published. (All given back, the same batch was refused at
    every try, for ever.)"""
    poison = publish("t", {"n": 0}, key="a")
    fine = [publish("t", {"n": 1}, key="b"), publish("t", {"n": 2})]
    unreachable = publish("t", {"n": 3}, key="c")

    def raised(messages):
        ids = {m.id for m in messages}
        if poison in ids:
            return BrokerRefused("no route" if len(ids) == 1 else "one of them has no route")
        if ids == {unreachable}:
            return ConnectionError("partition c unavailable")
        return None

    unit = relay(lambda message: None, retry_base_seconds=1)
    unit.publisher = publisher = RaisingPublisher(raised)
    counts = unit.run_once()
    assert (counts.published, counts.dead_lettered, counts.retried) == (2, 1, 1)
    assert sorted(m.id for m in publisher.sent) == sorted(fine)
    dead = OutboxDeadLetter.objects.get()
    assert (dead.id, dead.error) == (poison, "no route")
    assert list(OutboxEvent.objects.values_list("id", flat=True)) == [unreachable]
    assert "partition c unavailable" in OutboxEvent.objects.get().last_error


def test_broker_refused_raised_for_a_batch_of_one_dead_letters_it():
    event_id = publish("t", {"n": 0}, key="k")
    unit = relay(lambda message: None, retry_base_seconds=1)
    unit.publisher = RaisingPublisher(lambda messages: BrokerRefused("no route"))
    assert unit.run_once().dead_lettered == 1
    assert OutboxDeadLetter.objects.get().id == event_id


def test_a_relay_whose_lease_ran_out_deletes_nothing_another_relay_holds():
    event_id = publish("t", {}, key="k")
    claim("1")
    OutboxEvent.objects.update(claimed_until=timezone.now())
    claim("2")
    db.execute(
        connection,
        "outbox_published",
        {"ids": [event_id], "token": "00000000-0000-0000-0000-000000000001"},
    )
    assert OutboxEvent.objects.filter(id=event_id).exists()


def test_key_rows_without_events_are_pruned():
    publish("t", {}, key="gone")
    publish("t", {}, key="kept")
    OutboxEvent.objects.filter(key="gone").delete()
    assert relay(print).prune_keys() == 1
    assert list(OutboxEvent.objects.values_list("key", flat=True)) == ["kept"]


def test_consume_once_records_the_event_in_the_handlers_transaction():
    with pytest.raises(transaction.TransactionManagementError):
        consume_once(1, consumer="c")
    with transaction.atomic():
        assert consume_once("7", consumer="c") is True
    with transaction.atomic():
        assert consume_once(7, consumer="c") is False
        assert consume_once(7, consumer="other") is True
    with pytest.raises(RuntimeError), transaction.atomic():
        consume_once(8, consumer="c")
        raise RuntimeError  # the handler failed: the record goes with its writes
    assert sorted(ProcessedEvent.objects.values_list("consumer", "event_id")) == [
        ("c", 7), ("other", 7),
    ]  # fmt: skip


def test_the_setting_names_a_broker_url_or_a_callable():
    assert type(build_publisher("amqp://u:p@h:5672/?exchange=events")).__name__ == (
        "RabbitMQPublisher"
    )
    assert build_publisher("amqp://u:p@h:5672/?exchange=events").exchange == "events"
    assert type(build_publisher("nats://h:4222")).__name__ == "NatsPublisher"
    assert isinstance(build_publisher("builtins.print"), CallablePublisher)


def test_the_admin_shows_the_backlog_and_the_metrics_have_it(admin_client):
    publish("t", {"n": 1}, key="k")
    publish("t", {"n": 2})
    OutboxEvent.objects.update(created_at=timezone.now() - timedelta(seconds=90))
    page = admin_client.get("/admin/django_pgjobs/outboxevent/").content.decode()
    assert "Backlog: 2 event(s) not yet published; oldest waiting 90 s" in page
    assert admin_client.get("/admin/django_pgjobs/outboxdeadletter/").status_code == 200
    metrics = admin_client.get("/pgjobs/metrics").content.decode()
    assert "pgjobs_outbox_backlog 2.0" in metrics
    assert "pgjobs_outbox_oldest_age_seconds 9" in metrics


def test_an_events_page_masks_the_values_of_redact_keys(admin_client):
    """As a job's arguments are: the payload and the headers of an event waiting and of one
    the broker refused show ``REDACT_KEYS`` values (password, token here) masked."""
    refused = publish("t", {"nested": {"Token": "tok-7"}}, key="k")

    def broker(message):
        raise BrokerRefused("no route")

    relay(broker).run_once()
    waiting = publish("t", {"user": "ann", "password": "hunter2-pw"}, headers={"token": "tok-9"})
    pages = [
        f"/admin/django_pgjobs/outboxevent/{waiting}/change/",
        f"/admin/django_pgjobs/outboxdeadletter/{refused}/change/",
    ]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        for secret in ("hunter2-pw", "tok-9", "tok-7"):
            assert secret not in body, (url, secret)
    assert "ann" in admin_client.get(pages[0]).content.decode()


@pytest.mark.parametrize(
    ("publisher", "problem"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", None),
        ("nats://127.0.0.1:4222", None),
        ("builtins.print", None),
        ("testproject.no_such_module.publish", "No module named"),
        ("django_pgjobs.conf.MIN_TOKEN_CHARS", "neither a broker URL"),
    ],
)
def test_the_outbox_publisher_setting_is_checked(publisher, problem):
    from django.core.checks import run_checks
    from django.test import override_settings

    from django_pgjobs.checks import check_outbox_publisher

    with override_settings(PGJOBS={**settings.PGJOBS, "OUTBOX_PUBLISHER": publisher}):
        errors = check_outbox_publisher()
        assert [e.id for e in errors] == ([] if problem is None else ["pgjobs.E005"])
        if problem:
            assert problem in errors[0].msg
            assert "pgjobs.E005" in [e.id for e in run_checks()]


@pytest.mark.parametrize(
    ("publisher", "problem"),
    [
        ("nonsense", "doesn't look like a module path"),
        ("testproject.no_such_module.publish", "No module named"),
        ("django_pgjobs.conf.MIN_TOKEN_CHARS", "neither a broker URL"),
    ],
)
def test_pgjobs_relay_refuses_a_publisher_it_cannot_build_with_a_command_error(publisher, problem):
    """``--publisher`` is not the setting the system check reads: a typo was a traceback."""
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--publisher") as refused:
        call_command("pgjobs_relay", "--publisher", publisher, "--burst")
    assert problem in str(refused.value)
