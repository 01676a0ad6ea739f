"""``publish()``: one INSERT on the caller's connection, like ``enqueue()``."""

from __future__ import annotations

from typing import Any

from .. import db
from ..conf import get_config
from ..payload import ArgumentsNotJSON, dump_payload
from .models import KEY_MAX, TOPIC_MAX


def _check_text(what: str, value: Any, longest: int) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(
            f"{what} must be a non-empty string without surrounding spaces, not {value!r}"
        )
    if len(value) > longest or "\x00" in value:
        raise ValueError(f"{what} must be at most {longest} characters without NUL, not {value!r}")
    return value


def _headers_json(headers: Any) -> str:
    if headers is None:
        return "{}"
    if not isinstance(headers, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in headers.items()
    ):
        raise ArgumentsNotJSON(f"headers must be a dict of strings to strings, not {headers!r}")
    return dump_payload(headers, get_config().MAX_PAYLOAD_BYTES)


def publish(
    topic: str, payload: Any, key: str | None = None, headers: dict[str, str] | None = None
) -> int:
    """Write one event for the relay to publish to ``topic`` (an AMQP routing key, a NATS
    subject) once the caller's transaction commits; nothing is sent if it rolls back. Events of
    one ``key`` are published in commit order, one at a time. ``payload`` must be JSON (as job
    arguments: ``TypeError`` otherwise, and nothing is written). Returns the event's id, which
    is the message id consumers see."""
    params = {
        "topic": _check_text("topic", topic, TOPIC_MAX),
        "payload": dump_payload(payload, get_config().MAX_PAYLOAD_BYTES),
        "headers": _headers_json(headers),
    }
    connection = db.jobs_connection()
    if key is None:
        (row,) = db.execute_prepared(connection, "outbox_publish", params)
    else:
        params["key"] = _check_text("key", key, KEY_MAX)
        (row,) = db.execute_prepared(connection, "outbox_publish_keyed", params)
    return row["id"]
