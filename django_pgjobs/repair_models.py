"""The repair records (``pgjobs_repair``): one row per dead letter an operator edited and
requeued, a model of the ``django_pgjobs`` app imported by ``models``.

The edit's statement (``requeue_edited_dead_letter``) writes it with the new job: the dead letter
is gone from then on, and the job is deleted when it succeeds (or pruned after
``KEEP_SUCCEEDED_SECONDS``), taking its audit trail (``repairs``) with it. This row is what stays
of the edit: who changed which arguments of which job, when, and the id of the job it became. It
is pruned with the dead letters, by age: ``DEAD_LETTER_MAX_AGE_SECONDS`` after the edit
(``prune_dead_letters``). See docs/howto/repair.md.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .limits import ERROR_TYPE_MAX, QUEUE_NAME_MAX


class Repair(models.Model):
    """One edit of a dead letter's arguments, requeued as a new job."""

    id = models.BigAutoField(verbose_name=_("id"), primary_key=True)
    repaired_at = models.DateTimeField(verbose_name=_("repaired at"), default=timezone.now)
    repaired_by = models.CharField(
        verbose_name=_("repaired by"),
        max_length=255,
        help_text=_("Who edited the arguments, e.g. admin user 'alice'."),
    )
    name = models.CharField(verbose_name=_("name"), max_length=255)
    queue = models.CharField(verbose_name=_("queue"), max_length=QUEUE_NAME_MAX)
    dead_letter_id = models.BigIntegerField(
        verbose_name=_("dead letter"), help_text=_("The dead letter edited (gone since).")
    )
    job_id = models.BigIntegerField(
        verbose_name=_("job id"), help_text=_("Id the job had when it was dead-lettered.")
    )
    requeued_as = models.BigIntegerField(
        verbose_name=_("requeued as"), help_text=_("Id of the job the edit requeued.")
    )
    error_type = models.CharField(
        verbose_name=_("error type"), max_length=ERROR_TYPE_MAX, blank=True, default=""
    )
    reason = models.TextField(
        verbose_name=_("reason"), help_text=_("Why the job had been dead-lettered.")
    )
    args_before = models.JSONField(default=list)
    kwargs_before = models.JSONField(default=dict)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)

    class Meta:
        verbose_name = _("repair")
        verbose_name_plural = _("repairs")
        db_table = "pgjobs_repair"
        ordering = ["-repaired_at", "-id"]
        indexes = [
            # the admin's list (newest first) and the prune (oldest first)
            models.Index(F("repaired_at").desc(), F("id").desc(), name="pgjobs_repair_at_idx"),
            # a job's repairs: by the id it had, or the id it was requeued as (the admin's
            # search; an edited job that was dead-lettered and edited again)
            models.Index("job_id", name="pgjobs_repair_job_idx"),
            models.Index("requeued_as", name="pgjobs_repair_requeued_idx"),
        ]

    def __str__(self) -> str:
        return gettext("%(name)s (job #%(id)s)") % {"name": self.name, "id": self.job_id}
