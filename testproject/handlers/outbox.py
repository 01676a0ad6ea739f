"""docs/howto/outbox.md: an order placed with its event, and a consumer that handles each event
once (tests/test_outbox_brokers.py runs them against the real RabbitMQ and NATS)."""

from __future__ import annotations

import json

from django.db import transaction
from django.db.models import F

from django_pgjobs.outbox import consume_once, publish
from testproject.demo.models import Counter


# The producer: the state change and its event commit together, or neither does.
def place_order(order_number: str, total: int) -> int:
    with transaction.atomic():
        Counter.objects.create(name=f"order:{order_number}", value=total)
        return publish(
            "orders.placed",
            {"order": order_number, "total": total},
            key=f"order:{order_number}",  # the events of one order arrive in commit order
        )


# The consumer (in the service that receives the event): each event id is handled once, even
# when the broker delivers it twice.
def handle_order_placed(message_id: str, body: bytes) -> bool:
    event = json.loads(body)
    with transaction.atomic():
        if not consume_once(message_id, consumer="revenue"):
            return False  # a redelivery: already counted
        Counter.objects.filter(name="revenue").update(value=F("value") + event["total"])
        return True
