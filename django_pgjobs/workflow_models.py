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


class WorkflowState(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    ABORTED = "aborted", "aborted"


class Workflow(models.Model):
    """A chain of steps, each one job or a group of jobs, run one step after the other."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255, help_text="What it chains, e.g. 'resize x200 > zip'.")
    state = models.CharField(
        max_length=16, choices=WorkflowState.choices, default=WorkflowState.RUNNING
    )
    step = models.IntegerField(default=0, help_text="The step running now, from 0.")
    remaining = models.IntegerField(help_text="Jobs of the current step not succeeded yet.")
    sizes = models.JSONField(default=list, help_text="How many jobs each step has.")
    reason = models.TextField(blank=True, default="", help_text="Why it failed or was aborted.")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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
        return f"{self.name} (workflow #{self.id})"
