"""django-pgjobs: background jobs in the PostgreSQL database your Django project already has.

Public API: ``job`` (decorator), ``enqueue``, ``enqueue_many``, ``RetryPolicy``; models in
``django_pgjobs.models`` (``Job``, ``DeadLetter``); the worker is ``manage.py runjobs``.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["job", "enqueue", "enqueue_many", "RetryPolicy", "UnknownJobError", "__version__"]

if TYPE_CHECKING:
    from .backoff import RetryPolicy
    from .enqueueing import enqueue, enqueue_many
    from .registry import UnknownJobError, job


def __getattr__(name: str) -> Any:
    # Lazy: importing django_pgjobs must not import models before the app registry is ready.
    if name == "job":
        from .registry import job

        return job
    if name in ("enqueue", "enqueue_many"):
        from . import enqueueing as module

        return getattr(module, name)
    if name == "RetryPolicy":
        from .backoff import RetryPolicy

        return RetryPolicy
    if name == "UnknownJobError":
        from .registry import UnknownJobError

        return UnknownJobError
    raise AttributeError(f"module 'django_pgjobs' has no attribute {name!r}")
