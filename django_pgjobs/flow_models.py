"""The flow control table (``@job(concurrency_limit=...)``, ``rate_limit``, ``fairness_key``):
one row per key, a model of the ``django_pgjobs`` app imported by ``models``. Why it is shaped
so: docs/explanation/flow-control.md."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from .limits import FLOW_KEY_MAX


class FlowKey(models.Model):
    """A key jobs share (their ``flow_key``): its limits, its token bucket and when it was last
    served. Written by the enqueue of its jobs and by the flow claim (``claim_jobs_flow``),
    which locks it while it decides; the slots a key holds are its running jobs, counted, not
    kept here, so a job that ends in any way (success, retry, dead letter, rescue) frees its
    slot with no bookkeeping."""

    key = models.CharField(primary_key=True, max_length=FLOW_KEY_MAX)
    concurrency_limit = models.IntegerField(
        null=True, blank=True, help_text="Jobs of this key running at once at most; empty: any."
    )
    rate = models.FloatField(
        null=True, blank=True, help_text="Jobs started per second at most; empty: no rate limit."
    )
    burst = models.FloatField(
        null=True, blank=True, help_text="The token bucket's size: jobs started at once at most."
    )
    tokens = models.FloatField(default=0, help_text="Tokens left at refilled_at.")
    refilled_at = models.DateTimeField(null=True, blank=True)
    last_served_at = models.DateTimeField(
        null=True, blank=True, help_text="When a claim last took a job of this key (fairness)."
    )
    ready_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a job of this key may be claimable (a hint the claim keeps, never late); "
        "empty: none ready nor running.",
    )
    claimed_xid = models.BigIntegerField(
        null=True, blank=True, help_text="The transaction of the last claim that took a job."
    )

    class Meta:
        db_table = "pgjobs_flow_key"
        verbose_name = "flow key"
        indexes = [
            # the flow claim's walk: due keys, least recently served first
            models.Index(
                F("last_served_at").asc(nulls_first=True),
                "key",
                name="pgjobs_flow_key_served_idx",
                condition=Q(ready_at__isnull=False),
            ),
            # the flow claim's wait: the earliest key due later
            models.Index(
                "ready_at", name="pgjobs_flow_key_ready_idx", condition=Q(ready_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return self.key
