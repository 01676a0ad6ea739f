"""The Tasks framework in use: Django's own ``django.tasks`` (Django 6) or, on Django 5.2, the
``django_tasks`` backport (``pip install "django-pgjobs[tasks]"``).

Everything the backend and the worker need from it is imported here, under Django 6's names, so
no other module cares which one it is. ``AVAILABLE`` is False when neither is installed.
"""

from __future__ import annotations

try:  # Django 6
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:
    try:  # Django 5.2 with the backport
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import (
            InvalidTaskBackendError as InvalidTaskBackend,
        )
        from django_tasks.exceptions import (
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import (
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        FRAMEWORK = "django_tasks"
    except ImportError:
        FRAMEWORK = None

AVAILABLE = FRAMEWORK is not None

__all__ = [
    "AVAILABLE",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
