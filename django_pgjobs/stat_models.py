"""The per-minute statistics table (``pgjobs_stat``) and its ``integer[]`` column: models of
the ``django_pgjobs`` app, imported by ``models``."""

from __future__ import annotations

import json

from django.db import models

from .limits import QUEUE_NAME_MAX


class IntegerArrayField(models.Field):
    """A PostgreSQL ``integer[]`` column, as a list of ints.

    ``django.contrib.postgres``'s ArrayField would oblige every project to add that app to
    INSTALLED_APPS (Django 6 refuses to start without it: check ``postgres.E005``) for one column
    that only the statistics statements write.
    """

    description = "List of integers (PostgreSQL integer[])"

    def db_type(self, connection):
        return "integer[]"

    def get_db_prep_value(self, value, connection, prepared=False):
        return None if value is None else [int(item) for item in value]

    def to_python(self, value):
        if isinstance(value, str):
            return [int(item) for item in json.loads(value)]
        return value

    def value_to_string(self, obj):
        return json.dumps(self.value_from_object(obj))


class QueueStat(models.Model):
    """What the workers of one queue did in one minute, for the admin dashboard.

    Finished jobs are deleted, so throughput, failure rate and wait percentiles need this
    aggregate. Workers count in memory and add their counts with one upsert every few seconds
    (``metrics.QueueMetrics``); rows older than ``metrics.KEEP_SECONDS`` are pruned.
    """

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=QUEUE_NAME_MAX)
    minute = models.DateTimeField(help_text="Start of the minute (database clock).")
    succeeded = models.IntegerField(default=0)
    retried = models.IntegerField(default=0, help_text="Failed attempts that will be retried.")
    dead_lettered = models.IntegerField(
        default=0, help_text="Jobs moved to the dead letters by a worker."
    )
    pruned = models.IntegerField(
        default=0,
        db_default=0,  # the workers' counts upsert does not name it
        help_text="Dead letters of this queue pruned by retention (DEAD_LETTER_MAX_* settings).",
    )
    wait_buckets = IntegerArrayField(
        default=list,
        help_text="Claims per wait-time bucket (``metrics.WAIT_BUCKET_BOUNDS``); wait is the "
        "time from due (run_after) to claim.",
    )

    class Meta:
        db_table = "pgjobs_stat"
        ordering = ["-minute", "queue"]
        constraints = [
            models.UniqueConstraint("queue", "minute", name="pgjobs_stat_queue_minute"),
        ]
        indexes = [models.Index("minute", name="pgjobs_stat_minute_idx")]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.minute:%Y-%m-%d %H:%M}"
