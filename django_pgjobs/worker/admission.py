"""Admission: whether this worker can run a claimed job, and with which definition.

A job that names no registered function (or, for a task row, no Task), or whose arguments do not
fit its function, is refused: ``admit()`` says why in a ``Refusal`` and the failure policy
dead-letters it (``FailurePolicy.refuse``), except a job this worker does not know (``unknown``)
enqueued less than ``UNKNOWN_JOB_GRACE_SECONDS`` ago: that one goes back, attempt not spent, for a
worker of a newer release (a rolling deploy). An admitted job gets its definition's lease and
timeout (a timeout given with ``.using(timeout=...)`` comes first). Pure apart from the job it
is given; dispatcher thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry, versions
from ..claims import ClaimedJob
from .lookup import NotATask, definition_of


@dataclass(frozen=True)
class Refusal:
    """Why a job cannot run here: its stored error type, the dead letter's reason, the error."""

    error_type: str
    reason: str
    error: Exception
    unknown: bool = False  # no function or Task of this name here: a later release may know it


def admit(job: ClaimedJob) -> registry.JobDefinition | Refusal:
    """The definition to run ``job`` with, or the ``Refusal`` to dead-letter it with."""
    try:
        definition = definition_of(job)
    except NotATask as error:
        return Refusal("NotATask", f"not a task: {error}", error, unknown=True)
    except registry.UnknownJobError as error:
        # the error's message repeats the name: the reason says it once
        reason = f"unknown job {job.name!r}: no function is registered under this name"
        return Refusal("UnknownJob", f"{reason} in this worker", error, unknown=True)
    try:  # a row of an older payload version: its arguments brought to the function's
        version, steps = getattr(definition, "version", 1), getattr(definition, "upgrade", None)
        job.args, job.kwargs = versions.upgrade_arguments(
            job.name, version, steps, job.version, job.args, job.kwargs
        )
    except versions.CannotUpgrade as error:
        return Refusal(error.error_type, str(error), error, unknown=error.newer)
    try:
        definition.check_arguments(job.args, job.kwargs)
    except TypeError as error:
        return Refusal("BadArguments", f"arguments do not fit {job.name}: {error}", error)
    job.lease_seconds = definition.get_lease_seconds()
    if job.timeout is None:  # the row's (.using(timeout=...)) comes first
        job.timeout = definition.get_timeout()
    return definition
