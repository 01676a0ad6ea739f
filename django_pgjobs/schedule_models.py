"""The recurring jobs' tables (``@job(cron=...)``, the schedules admin): models of the
``django_pgjobs`` app, imported by ``models``."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Schedule(models.Model):
    """A recurring job: its job is enqueued at each fire time of ``cron`` in ``time_zone``,
    once whichever workers run (``ScheduleFire``). Declared in code (``@job(cron=...)``,
    synced when a worker starts; the code owns its definition) or added in the admin."""

    SOURCES = [("code", _("declared in code")), ("admin", _("added in the admin"))]

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(verbose_name=_("name"), max_length=255, unique=True)
    job_name = models.CharField(
        verbose_name=_("job name"), max_length=255, help_text=_("Registered name of the job.")
    )
    cron = models.CharField(
        verbose_name=_("cron"),
        max_length=255,
        help_text=_("Five fields (minute hour day month weekday) or @hourly, ..."),
    )
    time_zone = models.CharField(
        verbose_name=_("time zone"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("IANA name; empty: the project's."),
    )
    args = models.JSONField(verbose_name=_("args"), default=list, blank=True)
    kwargs = models.JSONField(verbose_name=_("kwargs"), default=dict, blank=True)
    catch_up = models.PositiveSmallIntegerField(
        verbose_name=_("catch up"),
        default=1,
        help_text=_(
            "Fire times missed while no worker ran that still run, most recent first "
            "(0: skip them)."
        ),
    )
    paused = models.BooleanField(
        verbose_name=_("paused"), default=False, help_text=_("A paused schedule fires nothing.")
    )
    source = models.CharField(
        verbose_name=_("source"), max_length=8, choices=SOURCES, default="admin"
    )
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fire_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.BigIntegerField(null=True, blank=True)
    changed_at = models.DateTimeField(
        default=timezone.now, help_text=_("Last change of its definition or pause.")
    )

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        db_table = "pgjobs_schedule"
        ordering = ["name"]
        # the scheduler's look: active schedules by next fire time
        indexes = [
            models.Index("next_fire_at", name="pgjobs_schedule_due_idx", condition=Q(paused=False))
        ]

    def __str__(self) -> str:
        return self.name


class ScheduleFire(models.Model):
    """One fire time of a schedule and the job it enqueued: the unique (schedule, fire time)
    pair is what makes each fire time run once, whichever workers try (invariant 17)."""

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    fire_time = models.DateTimeField()
    job_id = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Id of the job enqueued in pgjobs_job; empty: skipped, a job holding its "
        "unique key was ready or running.",
    )
    manual = models.BooleanField(default=False, help_text="Run now from the admin.")
    fired_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pgjobs_schedule_fire"
        ordering = ["-fire_time"]
        constraints = [
            models.UniqueConstraint("schedule", "fire_time", name="pgjobs_schedule_fire_once")
        ]
        indexes = [models.Index("fired_at", name="pgjobs_schedule_fired_idx")]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.fire_time:%Y-%m-%d %H:%M}"
