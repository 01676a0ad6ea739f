"""Rows enqueued through ``django.tasks``: how a worker finds and runs the task a row names.

A task row has ``task_backend`` set (the ``TASKS`` alias it was enqueued through) and the task's
module path as ``name``. The worker imports that path, as Django's contract requires, and runs
the object only if it is a ``Task`` of the framework in use and the alias names a
``PgJobsBackend``; anything else is dead-lettered, never called. Rows of ``@job`` functions
never come here: only registered jobs run (``registry``).
"""

from __future__ import annotations

import dataclasses
from traceback import format_exception
from typing import Any, ClassVar

from django.utils import timezone
from django.utils.module_loading import import_string

from . import taskframework as tf
from .context import current_job
from .registry import JobDefinition


class NotATask(LookupError):
    """A task row whose name or backend does not resolve to a task this worker may run."""


@dataclasses.dataclass(frozen=True)
class TaskDefinition(JobDefinition):
    """A ``django.tasks`` Task as the worker runs it: its function called with the row's
    arguments (and a ``TaskContext`` first when it takes one), Django's ``task_started`` and
    ``task_finished`` sent around the call, the JSON-normalised return value kept."""

    task: Any = None
    backend: Any = None  # the PgJobsBackend of ``task_backend``
    # Always run by an executor thread through ``run()``: an ``async def`` task is awaited there
    # by ``Task.call`` (asgiref's async_to_sync), inside the signals, context and result above.
    is_async: ClassVar[bool] = False

    def check_arguments(self, args: Any, kwargs: Any) -> None:
        if self.task is not None and self.task.takes_context and isinstance(args, list):
            args = [None, *args]  # the context fills the first parameter
        super().check_arguments(args, kwargs)

    def run(self, args: list, kwargs: dict) -> Any:
        job = current_job()
        result = self.backend.running_result(self.task, job)
        tf.task_started.send(type(self.backend), task_result=result)
        try:
            if self.task.takes_context:
                value = self.task.call(tf.TaskContext(task_result=result), *args, **kwargs)
            else:
                value = self.task.call(*args, **kwargs)
            value = tf.normalize_json(value)  # a value JSON cannot hold fails the attempt
        except BaseException as error:
            _set(result, status=tf.TaskResultStatus.FAILED, finished_at=timezone.now())
            result.errors.append(task_error(error))
            # inside the handler: Django's logging receiver reads sys.exc_info()
            tf.task_finished.send(type(self.backend), task_result=result)
            raise
        _set(
            result,
            status=tf.TaskResultStatus.SUCCESSFUL,
            finished_at=timezone.now(),
            _return_value=value,
        )
        tf.task_finished.send(type(self.backend), task_result=result)
        return value


def task_error(error: BaseException) -> Any:
    kind = type(error)
    return tf.TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(format_exception(kind, error, error.__traceback__)),
    )


def _set(result: Any, **values: Any) -> None:
    for attribute, value in values.items():
        object.__setattr__(result, attribute, value)  # TaskResult is frozen


def find_task(module_path: str) -> Any:
    """The ``Task`` at ``module_path``; ``NotATask`` when it cannot be imported or is not one."""
    if not tf.AVAILABLE:
        raise NotATask(
            "no Tasks framework is installed in this worker (Django 6's django.tasks, or the "
            "django-tasks backport on Django 5.2)"
        )
    try:
        found = import_string(module_path)
    except ImportError as error:
        raise NotATask(f"{module_path!r} cannot be imported: {error}") from None
    if not isinstance(found, tf.Task):
        raise NotATask(
            f"{module_path!r} is a {type(found).__name__}, not a {tf.FRAMEWORK} Task: it is "
            "never called"
        )
    return found


__all__ = ["NotATask", "TaskDefinition", "find_task", "task_error"]
