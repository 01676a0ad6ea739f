"""The states of a job, defined once.

Stored in ``pgjobs_job.status`` (the names follow ``django.tasks.TaskResultStatus``):

``ready``
    Waiting to run. It can be claimed once ``run_after`` has passed.
``running``
    Claimed by a worker, which holds a lease on it until ``lease_expires_at`` and extends the
    lease by heartbeat while the job runs.
``successful``
    Finished without error. Kept with its return value (``result``) for
    ``PGJOBS["KEEP_RESULTS_SECONDS"]`` when enqueued with ``keep_result``; otherwise only kept
    when ``PGJOBS["KEEP_SUCCEEDED_SECONDS"]`` is above 0, else deleted when it completes.

``blocked``
    A step of a workflow waiting for the step before it (``docs/howto/workflows.md``): never
    claimed; the statement that completes the last job of the step before makes it ``ready``.
``cancelled``
    A step of a workflow that will not run: an operator cancelled it (Cancel job, ``abort()``,
    ``purge``), a step before it was dead-lettered or cancelled, or the workflow was aborted (the
    workflow's ``reason`` says which). Requeueing a dead letter of the workflow makes it
    ``blocked`` (or ``ready``) again; pruned with its workflow.

A job that fails its last attempt, names no registered job, or carries arguments that do not fit
its function leaves ``pgjobs_job`` and becomes a row of ``pgjobs_deadletter`` (``failed`` in
``django.tasks`` terms).

The admin and the docs split ``ready`` jobs into three views, derived from the row:

``due``
    ``ready``, never attempted, ``run_after`` passed: the backlog a worker would take next.
``scheduled``
    ``ready``, never attempted, ``run_after`` in the future.
``retrying``
    ``ready`` after at least one failed attempt, waiting for its next one.
"""

from __future__ import annotations

from django.db import models
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class Status(models.TextChoices):
    READY = "ready", _("ready")
    RUNNING = "running", _("running")
    SUCCESSFUL = "successful", _("successful")
    BLOCKED = "blocked", _("blocked")
    CANCELLED = "cancelled", _("cancelled")


class View(models.TextChoices):
    """Operator-facing subdivision of the stored statuses (see the module docstring)."""

    DUE = "due", _("due")
    SCHEDULED = "scheduled", _("scheduled")
    RETRYING = "retrying", _("retrying")
    RUNNING = "running", _("running")
    SUCCESSFUL = "successful", _("successful")


#: The views' names as the admin shows them, "dead" and the stored statuses too (translated).
_LABELS: dict[str, str | Promise] = {
    **dict(Status.choices),
    **dict(View.choices),
    "dead": _("dead"),
    "dead-lettered": _("dead-lettered"),
}


def view_label(value: str) -> str | Promise:
    """The name of a view or status (``due``, ``running``...) in the current language; an
    unknown value as it is."""
    return _LABELS.get(value, value)
