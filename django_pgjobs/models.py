"""The tables. Workers and operations use the raw SQL in ``sql/queries.sql``; the models exist for
migrations, the admin and users' own queries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .limits import (
    ERROR_TYPE_MAX,
    FLOW_KEY_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_NAME_MAX,
    TASK_BACKEND_MAX,
)
from .outbox.models import OutboxDeadLetter, OutboxEvent, OutboxKey, ProcessedEvent  # noqa: F401
from .states import Status, View

if TYPE_CHECKING:
    from .uniqueness import EnqueueOutcome


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

    def in_queue(self, queue: str):
        """Jobs of one queue. Running rows are not in ``pgjobs_job_queue_idx`` (the claim writes
        no entry there), so the condition names both halves: each is read through an index (that
        one, and the lease index for the running rows) instead of a scan of the table."""
        running = Q(status=Status.RUNNING)
        return self.filter(Q(queue=queue) & (~running | running))

    def lease_expired(self):
        return self.filter(status=Status.RUNNING, lease_expires_at__lt=timezone.now())


class RepairColumns(models.Model):
    """What ``pgjobs_job`` and ``pgjobs_deadletter`` both carry for repairs (``repair``,
    ``versions``), copied by dead-lettering and requeue."""

    version = models.IntegerField(
        default=1,
        db_default=1,  # statements that do not name it (older releases' INSERTs): version 1
        help_text=_("Version of the job's payload it was enqueued with (@job(version=...))."),
    )
    replayed_from = models.BigIntegerField(
        null=True,
        blank=True,
        help_text=_("Id of the dead letter the job was requeued from (empty: it was enqueued)."),
    )
    repairs = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text=_(
            "Audit trail of operator repairs (edited arguments, replays): at, by, what "
            "changed; carried between the job and its dead letters."
        ),
    )

    class Meta:
        abstract = True


class Job(RepairColumns):
    """A job waiting, running or (when retention is on) done. See ``states`` for the statuses."""

    id = models.BigAutoField(verbose_name=_("id"), primary_key=True)
    name = models.CharField(
        verbose_name=_("name"), max_length=255, help_text=_("Registered name of the job function.")
    )
    queue = models.CharField(verbose_name=_("queue"), max_length=QUEUE_NAME_MAX, default="default")
    priority = models.SmallIntegerField(
        verbose_name=_("priority"), default=0, help_text=_("-100..100, higher runs first.")
    )
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    run_after = models.DateTimeField(default=timezone.now, help_text=_("Not claimed before this."))
    attempts = models.IntegerField(
        default=0, help_text=_("Attempts started (counted before the job runs).")
    )
    max_attempts = models.IntegerField(default=5)
    unique_key = models.CharField(  # noqa: DJ001 (NULL: no key)
        verbose_name=_("unique key"), max_length=255, null=True, blank=True
    )
    waiting_key = models.CharField(  # noqa: DJ001 (NULL: no key, or no longer held)
        verbose_name=_("waiting key"),
        max_length=255,
        null=True,
        blank=True,
        help_text=_(
            "The unique key of a job enqueued with unique_scope='waiting': held until a "
            "worker takes the job (the claim clears it)."
        ),
    )
    # waiting_key as enqueued, kept when the claim clears it: a job back unstarted takes it back
    kept_waiting_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    flow_key = models.CharField(  # noqa: DJ001 (NULL: the plain claim takes it)
        verbose_name=_("flow key"),
        max_length=FLOW_KEY_MAX,
        null=True,
        blank=True,
        help_text=_(
            "The flow control key (pgjobs_flow_key) whose limits this job waits on: its "
            "concurrency key, fairness key, or its job's or queue's rate limit."
        ),
    )
    timeout = models.FloatField(
        null=True, blank=True, help_text=_("Seconds this job may run (.using(timeout=...)).")
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("Start of the latest attempt; empty while a worker holds the job unstarted."),
    )
    first_started_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Start of the first attempt (set once).")
    )
    returned_unstarted = models.BooleanField(
        default=False,
        db_default=False,  # statements that do not name it (older workers' INSERTs) keep working
        help_text=_(
            "Once given back by the rescue after a worker died holding it before its start "
            "was recorded: from then on its start is recorded before it runs."
        ),
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(
        null=True, blank=True, help_text=_("Fencing token of the current claim.")
    )
    worker = models.CharField(verbose_name=_("worker"), max_length=255, blank=True, default="")
    errors = models.JSONField(
        default=list,
        help_text=_("One entry per failed attempt: at, attempt, type, message, traceback."),
    )
    keep_result = models.BooleanField(
        verbose_name=_("keep result"),
        default=False,
        db_default=False,  # statements that do not name it (older workers' INSERTs) keep working
        help_text=_("Keep the return value as the job's result when it succeeds."),
    )
    result = models.JSONField(
        null=True, blank=True, help_text=_("The kept return value (jobs with keep_result).")
    )
    abort_requested_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When an abort of this running job was requested.")
    )
    abort_requested_by = models.CharField(  # noqa: DJ001 (NULL: no abort requested)
        verbose_name=_("abort requested by"),
        max_length=255,
        null=True,
        blank=True,
        help_text=_("Who or what requested the abort."),
    )
    progress = models.JSONField(
        null=True,
        blank=True,
        help_text=_(
            "What the running job last reported: done, total, note, at "
            "(current_job().set_progress)."
        ),
    )
    metadata = models.JSONField(
        null=True,
        blank=True,
        help_text=_("Free-form values the job set (current_job().set_metadata)."),
    )
    task_backend = models.CharField(
        max_length=TASK_BACKEND_MAX,
        blank=True,
        default="",
        db_default="",  # statements that do not name it (native jobs) leave it empty
        help_text=_(
            "The django.tasks backend alias of a task (name is then the task's module "
            "path); empty for jobs registered with @job."
        ),
    )
    trace_context = models.JSONField(
        null=True,
        blank=True,
        help_text=_("The enqueue's trace context (OpenTelemetry: tracing.py)."),
    )

    workflow = models.ForeignKey(
        "Workflow",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,  # the hot path never pays for it; a workflow is never deleted alone
        db_index=False,  # pgjobs_job_workflow_idx
        related_name="jobs",
        help_text=_("The workflow this job is a step of (chain, group)."),
    )
    workflow_step = models.IntegerField(null=True, blank=True, help_text=_("Its step, from 0."))
    workflow_member = models.IntegerField(
        null=True,
        blank=True,
        help_text=_("Its place among the jobs of its step (a group), from 0."),
    )

    objects = JobQuerySet.as_manager()

    #: What the ``enqueue()`` that returned this instance did (``uniqueness.EnqueueOutcome``:
    #: created, replaced or skipped); None on instances read from the database.
    enqueue_outcome: EnqueueOutcome | None = None

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
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
                condition=Q(status="ready", flow_key__isnull=True),
            ),
            # The flow claim (claim_jobs_flow): a key's ready jobs in FIFO order, and its
            # running ones (its used slots, counted).
            models.Index(
                "flow_key",
                "run_after",
                "id",
                name="pgjobs_job_flow_ready_idx",
                condition=Q(status="ready", flow_key__isnull=False),
            ),
            models.Index(
                "flow_key",
                name="pgjobs_job_flow_running_idx",
                condition=Q(status="running", flow_key__isnull=False),
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
            # The queues of the jobs (job_queue_names), the admin's lists of one queue. Running
            # rows stay out (the lease index has them): the claim then writes no entry here.
            models.Index(
                "queue", "status", name="pgjobs_job_queue_idx", condition=~Q(status="running")
            ),
            # Steps of a workflow (release, cancel, the admin page). Jobs outside one add none.
            models.Index(
                "workflow",
                "workflow_step",
                name="pgjobs_job_workflow_idx",
                condition=Q(workflow__isnull=False),
            ),
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
                condition=Q(status__in=["ready", "running", "successful", "blocked", "cancelled"]),
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


class DeadLetter(RepairColumns):
    """A job that will not run again by itself: attempts exhausted, unknown name or bad row."""

    id = models.BigAutoField(verbose_name=_("id"), primary_key=True)
    job_id = models.BigIntegerField(
        verbose_name=_("job id"), help_text=_("Id the job had in pgjobs_job.")
    )
    name = models.CharField(verbose_name=_("name"), max_length=255)
    queue = models.CharField(verbose_name=_("queue"), max_length=QUEUE_NAME_MAX)
    priority = models.SmallIntegerField(verbose_name=_("priority"), default=0)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=1)
    unique_key = models.CharField(  # noqa: DJ001 (NULL: no key)
        verbose_name=_("unique key"), max_length=255, null=True, blank=True
    )
    # the key of a job of the unique scope 'waiting' (unique_key: of 'in_flight'): requeued with it
    waiting_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # its flow control key (Job.flow_key): requeued with it
    flow_key = models.CharField(  # noqa: DJ001
        verbose_name=_("flow key"), max_length=FLOW_KEY_MAX, null=True, blank=True
    )
    timeout = models.FloatField(
        null=True, blank=True, help_text=_("Seconds this job may run (.using(timeout=...)).")
    )
    reason = models.TextField(
        verbose_name=_("reason"), help_text=_("Why the job was dead-lettered, in one sentence.")
    )
    error_type = models.CharField(
        verbose_name=_("error type"), max_length=ERROR_TYPE_MAX, blank=True, default=""
    )
    errors = models.JSONField(default=list)
    keep_result = models.BooleanField(
        default=False, db_default=False, help_text=_("Carried back when requeued.")
    )
    task_backend = models.CharField(
        max_length=TASK_BACKEND_MAX,
        blank=True,
        default="",
        db_default="",
        help_text=_("The django.tasks backend alias of a task; carried back when requeued."),
    )
    created_at = models.DateTimeField(help_text=_("When the job was first enqueued."))
    started_at = models.DateTimeField(null=True, blank=True)
    first_started_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Start of the job's first attempt.")
    )
    failed_at = models.DateTimeField(default=timezone.now)
    workflow_id = models.BigIntegerField(null=True, blank=True, help_text=_("Its workflow's id."))
    workflow_step = models.IntegerField(null=True, blank=True)
    workflow_member = models.IntegerField(null=True, blank=True)

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        db_table = "pgjobs_deadletter"
        ordering = ["-failed_at", "-id"]
        indexes = [
            models.Index(F("failed_at").desc(), F("id").desc(), name="pgjobs_dl_failed_idx"),
            models.Index("error_type", "failed_at", name="pgjobs_dl_type_idx"),
            models.Index("name", "failed_at", name="pgjobs_dl_name_idx"),
            models.Index("queue", "failed_at", name="pgjobs_dl_queue_idx"),
            # get_result: a failed job is found by the id it had in pgjobs_job.
            models.Index("job_id", name="pgjobs_dl_job_idx"),
            # A workflow's dead-lettered steps: its requeue resumes it once none is left, its
            # prune waits for them, its admin page lists them. Jobs outside one add none.
            models.Index(
                "workflow_id",
                name="pgjobs_dl_workflow_idx",
                condition=Q(workflow_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(name)s (job #%(id)s)") % {"name": self.name, "id": self.job_id}

    @property
    def last_error(self) -> dict | None:
        return self.errors[-1] if self.errors else None


class Dashboard(Job):
    """No rows of its own: the admin's "Dashboard" entry, so that the admin index, the app's
    page and the navigation sidebar link to the dashboard. Seeing it takes the permission to
    see jobs (``view_job``); it has no permissions of its own."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = _("dashboard")
        default_permissions = ()


# Tables in modules of their own, imported here so Django finds them (and migrations find
# ``models.IntegerArrayField``).
from .flow_models import FlowKey  # noqa: E402, F401
from .repair_models import Repair  # noqa: E402, F401
from .runtime_models import QueueState, ThrottleWindow, Worker  # noqa: E402, F401
from .schedule_models import Schedule, ScheduleFire  # noqa: E402, F401
from .stat_models import IntegerArrayField, QueueStat  # noqa: E402, F401
from .workflow_models import Workflow  # noqa: E402, F401 (a model of this app: registered with it)
