"""The small tables of the queues' and workers' state: the operator's switches per queue
(``pgjobs_queue``), the running ``runjobs`` processes (``pgjobs_worker``) and the unique keys'
throttle windows (``pgjobs_throttle``). Models of the ``django_pgjobs`` app, imported by
``models``."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .limits import QUEUE_NAME_MAX


class ThrottleWindow(models.Model):
    """The throttle window of a unique key (``@job(throttle=N)``): no other job of the key is
    enqueued before ``ends_at``, even after the job that opened it finished and was deleted.
    Opened and reopened by the enqueue statement itself (``ON CONFLICT (key) DO UPDATE ...
    WHERE ends_at <= now``); windows past their end are deleted by the worker's Pruner."""

    key = models.CharField(primary_key=True, max_length=255)
    ends_at = models.DateTimeField()

    class Meta:
        db_table = "pgjobs_throttle"
        ordering = ["ends_at"]

    def __str__(self) -> str:
        return f"{self.key} until {self.ends_at:%Y-%m-%d %H:%M:%S}"


class Worker(models.Model):
    """A running ``runjobs`` process, kept alive by its heartbeat and removed when it stops."""

    id = models.CharField(verbose_name=_("id"), primary_key=True, max_length=255)
    hostname = models.CharField(verbose_name=_("hostname"), max_length=255)
    pid = models.IntegerField(verbose_name=_("pid"))
    queues = models.JSONField(default=list, help_text=_("Empty list: all queues."))
    concurrency = models.IntegerField(verbose_name=_("concurrency"))
    started_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        db_table = "pgjobs_worker"
        ordering = ["hostname", "pid"]

    def __str__(self) -> str:
        return self.id


class QueueState(models.Model):
    """Operator switches per queue. A paused queue is skipped by every worker's claim."""

    name = models.CharField(verbose_name=_("name"), primary_key=True, max_length=QUEUE_NAME_MAX)
    paused = models.BooleanField(verbose_name=_("paused"), default=False)
    changed_at = models.DateTimeField(verbose_name=_("changed at"), default=timezone.now)

    class Meta:
        verbose_name = _("queue")
        verbose_name_plural = _("queues")
        db_table = "pgjobs_queue"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
