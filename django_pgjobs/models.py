"""The tables. Workers and operations use the raw SQL in ``sql/queries.sql``; the models exist for
migrations, the admin and users' own queries."""

from __future__ import annotations

import json

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from .limits import ERROR_TYPE_MAX, PRIORITY_MAX, PRIORITY_MIN, QUEUE_NAME_MAX, TASK_BACKEND_MAX
from .states import Status, View


def view_condition(view: str, now=None) -> Q:
    """The rows of one operator view of ``states.View``, as a ``Q``."""
    now = now or timezone.now()
    if view == View.DUE:
        return Q(status=Status.READY, attempts=0, run_after__lte=now)
    if view == View.SCHEDULED:
        return Q(status=Status.READY, attempts=0, run_after__gt=now)
    if view == View.RETRYING:
        return Q(status=Status.READY, attempts__gt=0)
    if view == View.RUNNING:
        return Q(status=Status.RUNNING)
    if view == View.SUCCESSFUL:
        return Q(status=Status.SUCCESSFUL)
    raise ValueError(f"unknown view {view!r}")


class JobQuerySet(models.QuerySet):
    def in_view(self, view: str):
        """Jobs in one of the operator views of ``states.View``."""
        return self.filter(view_condition(view))

    def lease_expired(self):
        return self.filter(status=Status.RUNNING, lease_expires_at__lt=timezone.now())


class Job(models.Model):
    """A job waiting, running or (when retention is on) done. See ``states`` for the statuses."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255, help_text="Registered name of the job function.")
    queue = models.CharField(max_length=QUEUE_NAME_MAX, default="default")
    priority = models.SmallIntegerField(default=0, help_text="-100..100, higher runs first.")
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    run_after = models.DateTimeField(default=timezone.now, help_text="Not claimed before this.")
    attempts = models.IntegerField(
        default=0, help_text="Attempts started (counted before the job runs)."
    )
    max_attempts = models.IntegerField(default=5)
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 (NULL: no key)
    waiting_key = models.CharField(  # noqa: DJ001 (NULL: no key, or no longer held)
        max_length=255,
        null=True,
        blank=True,
        help_text="The unique key of a job enqueued with unique_scope='waiting': held until a "
        "worker takes the job (the claim clears it).",
    )
    timeout = models.FloatField(
        null=True, blank=True, help_text="Seconds this job may run (.using(timeout=...))."
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Start of the latest attempt; empty while a worker holds the job unstarted.",
    )
    first_started_at = models.DateTimeField(
        null=True, blank=True, help_text="Start of the first attempt (set once)."
    )
    returned_unstarted = models.BooleanField(
        default=False,
        db_default=False,  # statements that do not name it (older workers' INSERTs) keep working
        help_text="Once given back by the rescue after a worker died holding it before its start "
        "was recorded: from then on its start is recorded before it runs.",
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(
        null=True, blank=True, help_text="Fencing token of the current claim."
    )
    worker = models.CharField(max_length=255, blank=True, default="")
    errors = models.JSONField(
        default=list,
        help_text="One entry per failed attempt: at, attempt, type, message, traceback.",
    )
    keep_result = models.BooleanField(
        default=False,
        db_default=False,  # statements that do not name it (older workers' INSERTs) keep working
        help_text="Keep the return value as the job's result when it succeeds.",
    )
    result = models.JSONField(
        null=True, blank=True, help_text="The kept return value (jobs with keep_result)."
    )
    abort_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="When an abort of this running job was requested."
    )
    abort_requested_by = models.CharField(  # noqa: DJ001 (NULL: no abort requested)
        max_length=255, null=True, blank=True, help_text="Who or what requested the abort."
    )
    task_backend = models.CharField(
        max_length=TASK_BACKEND_MAX,
        blank=True,
        default="",
        db_default="",  # statements that do not name it (native jobs) leave it empty
        help_text="The django.tasks backend alias of a task (name is then the task's module "
        "path); empty for jobs registered with @job.",
    )
    trace_context = models.JSONField(
        null=True, blank=True, help_text="The enqueue's trace context (OpenTelemetry: tracing.py)."
    )

    objects = JobQuerySet.as_manager()

    #: What the ``enqueue()`` that returned this instance did (``uniqueness.EnqueueOutcome``:
    #: created, replaced or skipped); None on instances read from the database.
    enqueue_outcome = None

    class Meta:
        db_table = "pgjobs_job"
        ordering = ["-priority", "run_after", "id"]
        indexes = [
            # Serves the claim: ready rows in claim order. Partial, so history and running rows
            # never slow it down. Proven by tests/test_operations.py (EXPLAIN of the claim, generic plan included).
            models.Index(
                F("priority").desc(),
                "run_after",
                "id",
                name="pgjobs_job_claim_idx",
                condition=Q(status="ready"),
            ),
            models.Index(
                "lease_expires_at",
                name="pgjobs_job_lease_idx",
                condition=Q(status="running"),
            ),
            models.Index(
                "finished_at",
                name="pgjobs_job_finished_idx",
                condition=Q(status="successful"),
            ),
            models.Index("queue", "status", name="pgjobs_job_queue_status_idx"),
            # The retrying view of the admin (list and per-queue counts). Only rows that failed
            # an attempt enter it, so enqueue and claim never touch it.
            models.Index(
                "queue",
                "run_after",
                "id",
                name="pgjobs_job_retrying_idx",
                condition=Q(status="ready", attempts__gt=0),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                "unique_key",
                name="pgjobs_job_unique_key_in_flight",
                # NOT NULL in the predicate: jobs without a key (most) add no index entry.
                condition=Q(unique_key__isnull=False, status__in=["ready", "running"]),
            ),
            models.UniqueConstraint(
                "waiting_key",
                name="pgjobs_job_waiting_key",
                # no status in the predicate: only waiting jobs have one (the claim clears it)
                condition=Q(waiting_key__isnull=False),
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="pgjobs_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, attempts__gte=0, attempts__lte=F("max_attempts")),
                name="pgjobs_job_attempts_range",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["ready", "running", "successful"]),
                name="pgjobs_job_status_valid",
            ),
            models.CheckConstraint(
                condition=~Q(queue=""),
                name="pgjobs_job_queue_not_empty",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.id}"

    @property
    def view(self) -> str:
        """The operator view (``states.View``) this job is in."""
        if self.status != Status.READY:
            return self.status
        if self.attempts > 0:
            return View.RETRYING
        return View.SCHEDULED if self.run_after > timezone.now() else View.DUE

    @property
    def last_error(self) -> dict | None:
        return self.errors[-1] if self.errors else None


class DeadLetter(models.Model):
    """A job that will not run again by itself: attempts exhausted, unknown name or bad row."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(help_text="Id the job had in pgjobs_job.")
    name = models.CharField(max_length=255)
    queue = models.CharField(max_length=QUEUE_NAME_MAX)
    priority = models.SmallIntegerField(default=0)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=1)
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 (NULL: no key)
    timeout = models.FloatField(
        null=True, blank=True, help_text="Seconds this job may run (.using(timeout=...))."
    )
    reason = models.TextField(help_text="Why the job was dead-lettered, in one sentence.")
    error_type = models.CharField(max_length=ERROR_TYPE_MAX, blank=True, default="")
    errors = models.JSONField(default=list)
    keep_result = models.BooleanField(
        default=False, db_default=False, help_text="Carried back when requeued."
    )
    task_backend = models.CharField(
        max_length=TASK_BACKEND_MAX,
        blank=True,
        default="",
        db_default="",
        help_text="The django.tasks backend alias of a task; carried back when requeued.",
    )
    created_at = models.DateTimeField(help_text="When the job was first enqueued.")
    started_at = models.DateTimeField(null=True, blank=True)
    first_started_at = models.DateTimeField(
        null=True, blank=True, help_text="Start of the job's first attempt."
    )
    failed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pgjobs_deadletter"
        ordering = ["-failed_at", "-id"]
        indexes = [
            models.Index(F("failed_at").desc(), F("id").desc(), name="pgjobs_dl_failed_idx"),
            models.Index("error_type", "failed_at", name="pgjobs_dl_type_idx"),
            models.Index("name", "failed_at", name="pgjobs_dl_name_idx"),
            models.Index("queue", "failed_at", name="pgjobs_dl_queue_idx"),
            # get_result: a failed job is found by the id it had in pgjobs_job.
            models.Index("job_id", name="pgjobs_dl_job_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (job #{self.job_id})"

    @property
    def last_error(self) -> dict | None:
        return self.errors[-1] if self.errors else None


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

    id = models.CharField(primary_key=True, max_length=255)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list, help_text="Empty list: all queues.")
    concurrency = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pgjobs_worker"
        ordering = ["hostname", "pid"]

    def __str__(self) -> str:
        return self.id


class QueueState(models.Model):
    """Operator switches per queue. A paused queue is skipped by every worker's claim."""

    name = models.CharField(primary_key=True, max_length=QUEUE_NAME_MAX)
    paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pgjobs_queue"
        ordering = ["name"]
        verbose_name = "queue"

    def __str__(self) -> str:
        return self.name


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


class Dashboard(Job):
    """No rows of its own: the admin's "Dashboard" entry, so that the admin index, the app's
    page and the navigation sidebar link to the dashboard. Seeing it takes the permission to
    see jobs (``view_job``); it has no permissions of its own."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = "dashboard"
        default_permissions = ()


class Schedule(models.Model):
    """A recurring job: its job is enqueued at each fire time of ``cron`` in ``time_zone``,
    once whichever workers run (``ScheduleFire``). Declared in code (``@job(cron=...)``,
    synced when a worker starts; the code owns its definition) or added in the admin."""

    SOURCES = [("code", "declared in code"), ("admin", "added in the admin")]

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255, unique=True)
    job_name = models.CharField(max_length=255, help_text="Registered name of the job.")
    cron = models.CharField(
        max_length=255, help_text="Five fields (minute hour day month weekday) or @hourly, ..."
    )
    time_zone = models.CharField(
        max_length=64, blank=True, default="", help_text="IANA name; empty: the project's."
    )
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    catch_up = models.PositiveSmallIntegerField(
        default=1,
        help_text="Fire times missed while no worker ran that still run, most recent first "
        "(0: skip them).",
    )
    paused = models.BooleanField(default=False, help_text="A paused schedule fires nothing.")
    source = models.CharField(max_length=8, choices=SOURCES, default="admin")
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fire_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.BigIntegerField(null=True, blank=True)
    changed_at = models.DateTimeField(
        default=timezone.now, help_text="Last change of its definition or pause."
    )

    class Meta:
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
