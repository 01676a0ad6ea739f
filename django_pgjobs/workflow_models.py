"""The workflow table: one row per chain or group enqueued (``django_pgjobs.workflows``).

A workflow's progress is counted here, in the database: ``step`` is the step running now and
``remaining`` how many of its jobs have not succeeded yet. The statement that completes a job of
a workflow decrements ``remaining`` (fenced by the job's claim token, so an acknowledgement from
a worker that lost its lease never counts) and, when it reaches zero, moves ``step`` on and makes
the next step's jobs ``ready`` (they were written ``blocked`` with the workflow).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


class WorkflowState(models.TextChoices):
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    ABORTED = "aborted", _("aborted")


class Workflow(models.Model):
    """A chain of steps, each one job or a group of jobs, run one step after the other."""

    id = models.BigAutoField(verbose_name=_("id"), primary_key=True)
    name = models.CharField(
        verbose_name=_("name"),
        max_length=255,
        help_text=_("What it chains, e.g. 'resize x200 > zip'."),
    )
    state = models.CharField(
        verbose_name=_("state"),
        max_length=16,
        choices=WorkflowState.choices,
        default=WorkflowState.RUNNING,
    )
    step = models.IntegerField(default=0, help_text=_("The step running now, from 0."))
    remaining = models.IntegerField(help_text=_("Jobs of the current step not succeeded yet."))
    sizes = models.JSONField(default=list, help_text=_("How many jobs each step has."))
    #: The steps that are groups, by index: a group of one job is still a group (its results a
    #: list). NULL on the rows of releases before it (their groups of one read as one job).
    groups = models.JSONField(
        null=True, blank=True, help_text=_("Which steps are groups (their indexes).")
    )
    reason = models.TextField(blank=True, default="", help_text=_("Why it failed or was aborted."))
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)
    finished_at = models.DateTimeField(verbose_name=_("finished at"), null=True, blank=True)

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        db_table = "pgjobs_workflow"
        ordering = ["-id"]
        app_label = "django_pgjobs"
        indexes = [
            # The workflows to prune, oldest first (prune_workflows): finished ones only.
            models.Index(
                "finished_at",
                name="pgjobs_workflow_finished_idx",
                condition=models.Q(finished_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(name)s (workflow #%(id)s)") % {"name": self.name, "id": self.id}
