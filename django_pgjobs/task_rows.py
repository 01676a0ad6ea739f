"""Rows enqueued through ``django.tasks``: how a worker finds and runs the task a row names.

A task row has ``task_backend`` set (the ``TASKS`` alias it was enqueued through) and the task's
module path as ``name``. The table is writable by anyone with the database, so a row never makes
a process import anything: the path is looked up among the modules the process has already
imported (every installed app's ``tasks`` and ``jobs`` modules and ``PGJOBS["JOB_MODULES"]`` are
imported at start-up, see ``backend.discover_task_modules``), and the object runs only if it is a
``Task`` of the framework in use and the alias names a ``PgJobsBackend``; anything else is
dead-lettered, never imported nor called. Rows of ``@job`` functions never come here: only
registered jobs run (``registry``).
"""

from __future__ import annotations

import dataclasses
import sys
from traceback import format_exception
from typing import Any, ClassVar

from django.utils import timezone

from . import taskframework as tf
from .context import current_job
from .errors import stored_type
from .payload import ResultNotJSON, dump_result
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
            value = _normalized_result(value)
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
        exception_class_path=stored_type(kind),
        traceback="".join(format_exception(kind, error, error.__traceback__)),
    )


def _set(result: Any, **values: Any) -> None:
    for attribute, value in values.items():
        object.__setattr__(result, attribute, value)  # TaskResult is frozen


def _normalized_result(value: Any) -> Any:
    """The return value as Django normalises it (tuples become lists...); ``ResultNotJSON``,
    as for a ``@job``, when JSON cannot hold it: the worker dead-letters the task at once."""
    try:
        return tf.normalize_json(value)
    except (TypeError, ValueError) as error:
        try:
            dump_result(value, max_bytes=sys.maxsize)  # its message names the offending path
        except ResultNotJSON as named:
            raise named from None
        raise ResultNotJSON(
            f"the return value is not JSON ({error}); the result of a task is kept as JSON"
        ) from None


#: Where a task must be defined for a task row to run it (the end of ``NotATask`` messages).
WHERE_TASKS_LIVE = (
    "a task row runs only a Task of a module imported at start-up (an installed app's tasks or "
    "jobs module, a module of PGJOBS['JOB_MODULES'], or a module they import); a row never "
    "makes a process import a module"
)


def find_task(module_path: str) -> Any:
    """The ``Task`` at ``module_path`` in a module this process has already imported;
    ``NotATask`` otherwise. Never imports: the path comes from a row anyone with the database
    can write, and importing runs a module's code."""
    if not tf.AVAILABLE:
        raise NotATask(
            "no Tasks framework is installed in this worker (Django 6's django.tasks, or the "
            "django-tasks backport on Django 5.2)"
        )
    module_name, _, attribute = module_path.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    if module is None:
        raise NotATask(f"{module_path!r} is not in a loaded module: {WHERE_TASKS_LIVE}")
    # The module's own namespace, not getattr(): a module __getattr__ or a lazily loaded
    # module's __getattribute__ could import or run code.
    found = object.__getattribute__(module, "__dict__").get(attribute)
    if not isinstance(found, tf.Task):
        kind = "nothing" if found is None else f"a {type(found).__name__}"
        raise NotATask(f"{module_path!r} is {kind}, not a {tf.FRAMEWORK} Task: it is never called")
    return found


__all__ = ["NotATask", "TaskDefinition", "find_task", "task_error"]
