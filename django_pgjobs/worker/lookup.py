"""Which definition a claimed row runs with: a ``@job`` row by the registry (only registered
jobs run), a task row (``task_backend`` set) by its ``django.tasks`` backend, which looks the
row's module path up among the modules already imported, never importing one, and accepts only a
Task (``backend.definition_for_row``)."""

from __future__ import annotations

from .. import registry, taskframework
from ..operations import ClaimedJob
from ..task_rows import NotATask

if taskframework.AVAILABLE:
    from ..backend import definition_for_row
else:  # no Tasks framework installed: no task row can run here

    def definition_for_row(job: ClaimedJob) -> registry.JobDefinition:
        raise NotATask(
            f"task row for backend {job.task_backend!r}, but no Tasks framework is installed in "
            "this worker (Django 6, or the django-tasks backport on Django 5.2)"
        )


def definition_of(job: ClaimedJob) -> registry.JobDefinition:
    """``registry.UnknownJobError`` for an unregistered ``@job`` name, ``NotATask`` for a task
    row that names no Task of a ``PgJobsBackend``."""
    if job.task_backend:
        return definition_for_row(job)
    return registry.get(job.name)


__all__ = ["NotATask", "definition_of"]
