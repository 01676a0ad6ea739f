"""The outbox's tables: events waiting for the relay, the events a broker refused, the per-key
rows that order publishers of one key, and the consumer side's processed events.

The relay uses the raw SQL in ``sql/queries.sql`` (``outbox_*``); the models exist for
migrations, the admin and users' own queries. docs/howto/outbox.md tells the whole story.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

#: Longest topic (an AMQP routing key is at most 255 bytes; a NATS subject has no fixed limit).
TOPIC_MAX = 255
#: Longest ordering key.
KEY_MAX = 255


class OutboxEvent(models.Model):
    """An event committed with the change it announces and not yet confirmed by the broker.

    Deleted once the broker confirmed it; moved to ``OutboxDeadLetter`` when the broker refuses
    it. Events of one ``key`` are published one at a time in id order, which is their commit
    order (``publish()`` takes the key's ``OutboxKey`` row lock before the id is drawn). Write
    events through ``publish()`` only: the relay finds a key's events through its ``OutboxKey``
    row, which ``publish()`` makes."""

    id = models.BigAutoField(verbose_name=_("id"), primary_key=True)
    topic = models.CharField(
        verbose_name=_("topic"), max_length=TOPIC_MAX, help_text=_("Routing key or subject.")
    )
    key = models.CharField(  # noqa: DJ001 (NULL: no order asked)
        verbose_name=_("key"),
        max_length=KEY_MAX,
        null=True,
        blank=True,
        help_text=_("Events of one key keep their order."),
    )
    payload = models.JSONField()
    headers = models.JSONField(default=dict)
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)
    available_at = models.DateTimeField(
        verbose_name=_("available at"),
        default=timezone.now,
        help_text=_("Not tried before this time (backoff after a failure)."),
    )
    attempts = models.IntegerField(
        verbose_name=_("attempts"), default=0, help_text=_("Failed tries (broker unreachable).")
    )
    last_error = models.TextField(verbose_name=_("last error"), blank=True, default="")
    claimed_until = models.DateTimeField(
        null=True, blank=True, help_text=_("A relay holds the event until then.")
    )
    claim_token = models.UUIDField(null=True, blank=True)

    class Meta:
        verbose_name = _("outbox event")
        verbose_name_plural = _("outbox events")
        db_table = "pgjobs_outbox_event"
        ordering = ["id"]
        indexes = [
            # "is an older event of this key still here?": the claim's head-of-key test
            models.Index("key", "id", name="pgjobs_outbox_key_idx", condition=Q(key__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.topic} #{self.id}"


class OutboxKey(models.Model):
    """One row per ordering key: ``publish()`` locks it for the rest of the caller's transaction,
    so two transactions publishing on one key draw their event ids in commit order."""

    key = models.CharField(max_length=KEY_MAX, primary_key=True)

    class Meta:
        db_table = "pgjobs_outbox_key"

    def __str__(self) -> str:
        return self.key


class OutboxDeadLetter(models.Model):
    """An event the broker refused (unroutable, no stream for the subject, rejected): kept with
    the broker's answer; the events after it of its key went on."""

    id = models.BigIntegerField(
        verbose_name=_("id"), primary_key=True, help_text=_("The event's id (its message id).")
    )
    topic = models.CharField(verbose_name=_("topic"), max_length=TOPIC_MAX)
    key = models.CharField(verbose_name=_("key"), max_length=KEY_MAX, null=True, blank=True)  # noqa: DJ001
    payload = models.JSONField()
    headers = models.JSONField(default=dict)
    created_at = models.DateTimeField(verbose_name=_("created at"))
    attempts = models.IntegerField(verbose_name=_("attempts"), default=0)
    error = models.TextField(verbose_name=_("error"))
    failed_at = models.DateTimeField(verbose_name=_("failed at"), default=timezone.now)

    class Meta:
        verbose_name = _("outbox dead letter")
        verbose_name_plural = _("outbox dead letters")
        db_table = "pgjobs_outbox_deadletter"
        ordering = ["-failed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.topic} #{self.id}"


class ProcessedEvent(models.Model):
    """Consumer side: an event id a consumer has handled (``outbox.consume_once``), inserted in
    the handler's transaction, so a redelivered event is skipped."""

    id = models.BigAutoField(primary_key=True)
    consumer = models.CharField(max_length=255)
    event_id = models.BigIntegerField()
    processed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pgjobs_processed_event"
        constraints = [
            models.UniqueConstraint("consumer", "event_id", name="pgjobs_processed_once")
        ]
        indexes = [models.Index("processed_at", name="pgjobs_processed_at_idx")]

    def __str__(self) -> str:
        return f"{self.consumer} #{self.event_id}"
