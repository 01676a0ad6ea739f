"""``django.tasks`` backend: ``TASKS = {"default": {"BACKEND": "django_pgjobs.backend.PgJobsBackend"}}``.

Summary
    ``@task`` functions (Django 6's ``django.tasks``, or the ``django_tasks`` backport on Django
    5.2) become job rows: ``enqueue()`` is one INSERT on the caller's connection, so inside
    ``transaction.atomic()`` the task is enqueued exactly when the caller commits and vanishes on
    rollback (no ``transaction.on_commit`` needed). ``runjobs`` runs them beside ``@job``
    functions, with leases, retries and dead letters; ``get_result()`` reads the row back.

Usage
    See ``docs/howto/django-tasks.md``.

Options (``TASKS[alias]["OPTIONS"]``, all optional)
    ``MAX_ATTEMPTS`` (default ``PGJOBS["DEFAULT_MAX_ATTEMPTS"]``), ``RETRY`` (a dict of
    ``RetryPolicy`` fields: ``base_seconds``, ``factor``, ``cap_seconds``, ``jitter``; default
    ``PGJOBS["RETRY_*"]``), ``LEASE_SECONDS`` (default ``PGJOBS["LEASE_SECONDS"]``), ``ATOMIC``
    (run the task and its completion in one transaction; default ``PGJOBS["DEFAULT_ATOMIC"]``).
    ``QUEUES`` (beside ``OPTIONS``) lists the queue names tasks may use; left out, tasks may
    use any queue (Django's default would allow only ``"default"``, and the ``@task`` of a
    module using another queue would fail at import).
    Results are kept ``PGJOBS["KEEP_RESULTS_SECONDS"]`` after a task succeeds; a failed task is
    a dead letter, kept until an operator deletes it.

Instrumentation
    Django's ``task_enqueued`` (sent when the enqueued row is committed), ``task_started`` and
    ``task_finished`` (sent by the worker around each attempt) and the ``django.tasks`` logger,
    plus this project's own signals and logs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules, import_string

from . import db, results
from . import taskframework as tf
from .backoff import RetryPolicy
from .conf import get_config, job_databases
from .registry import JobDefinition
from .task_rows import NotATask, TaskDefinition, find_task
from .validation import check_max_attempts, check_positive_seconds, check_queue

if not tf.AVAILABLE:
    raise ImportError(
        "django_pgjobs.backend needs the Tasks framework: Django 6 (django.tasks), or on Django "
        '5.2 the backport: pip install "django-pgjobs[tasks]"'
    )

__all__ = ["PgJobsBackend", "definition_for_row", "discover_task_modules"]

OPTION_NAMES = ("MAX_ATTEMPTS", "RETRY", "LEASE_SECONDS", "ATOMIC")

_STATUSES = {
    "ready": tf.TaskResultStatus.READY,
    "running": tf.TaskResultStatus.RUNNING,
    "successful": tf.TaskResultStatus.SUCCESSFUL,
    "failed": tf.TaskResultStatus.FAILED,
    "blocked": tf.TaskResultStatus.READY,  # a workflow step waiting for the one before
    "cancelled": tf.TaskResultStatus.FAILED,
}


class PgJobsBackend(tf.BaseTaskBackend):
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        if "QUEUES" not in params:
            self.queues = set()  # any queue (Django: empty QUEUES allows every queue name)
        where = f"TASKS[{alias!r}]"
        try:
            for queue in self.queues:
                check_queue(queue)
            self.max_attempts, self.retry, self.lease_seconds, self.atomic = _options(self.options)
        except (TypeError, ValueError) as error:
            raise ImproperlyConfigured(f"{where}: {error}") from None
        self._definitions: dict[Any, TaskDefinition] = {}

    # -- enqueueing -----------------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        if self.queues and task.queue_name not in self.queues:
            raise tf.InvalidTask(
                f"queue {task.queue_name!r} of task {task.module_path} is not in "
                f"TASKS[{self.alias!r}]['QUEUES'] ({', '.join(sorted(self.queues))}): add it "
                "there, or leave QUEUES out to accept any queue"
            )
        super().validate_task(task)
        try:
            check_queue(task.queue_name)
        except ValueError as error:
            raise tf.InvalidTask(str(error)) from None

    def definition(self, task: Any) -> TaskDefinition:
        """(Worker.) The job definition a task row runs with, one per task of the module: a
        worker asks for it at every claim of the task."""
        try:
            return self._definitions[task]
        except KeyError:
            pass
        definition = self._definitions[task] = self._new_definition(task)
        return definition

    def _new_definition(self, task: Any) -> TaskDefinition:
        return TaskDefinition(
            func=task.func,
            name=task.module_path,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=self.max_attempts,
            atomic=self.atomic,
            lease_seconds=self.lease_seconds,
            retry=self.retry,
            keep_result=True,
            task_backend=self.alias,
            task=task,
            backend=self,
        )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """One INSERT on the caller's connection (inside the caller's transaction, if any)."""
        self.validate_task(task)
        try:  # not remembered: each .using(run_after=...) is another task
            prepared = self._new_definition(task).using(run_after=task.run_after)
        except ValueError as error:  # what Django's validation leaves to backends
            raise tf.InvalidTask(str(error)) from None
        job = prepared.enqueue(*args, **kwargs)
        result = tf.TaskResult(
            task=task,
            id=_result_id(job.id, job._state.db),
            status=tf.TaskResultStatus.READY,
            enqueued_at=job.created_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        _send_when_committed(type(self), result, job._state.db)
        return result

    # -- results --------------------------------------------------------------------------------

    def get_result(self, result_id: Any) -> Any:
        """The task result ``result_id`` (the ``id`` of what ``enqueue()`` returned), as the
        alias it was enqueued through reports it (``result.backend``), whichever alias reads it.

        ``TaskResultDoesNotExist`` when no task has this id: never enqueued, rolled back,
        succeeded longer ago than ``PGJOBS["KEEP_RESULTS_SECONDS"]``, a ``@job`` row, or a row
        naming no Task of a module this process has imported (a row never makes it import one)
        or no ``PgJobsBackend`` alias.
        """
        job_id, alias = _job_id(result_id)
        try:
            found = results.get_result(job_id, using=alias)
        except results.JobResultDoesNotExist:
            raise tf.TaskResultDoesNotExist(result_id) from None
        if not found.task_backend:  # a @job row
            raise tf.TaskResultDoesNotExist(result_id)
        try:
            enqueued_through = pgjobs_backend(found.task_backend)
            task = find_task(found.name)
        except NotATask as error:
            raise tf.TaskResultDoesNotExist(f"{result_id}: {error}") from None
        return enqueued_through._task_result(task, found)

    async def aget_result(self, result_id: Any) -> Any:
        return await sync_to_async(self.get_result)(result_id)

    def running_result(self, task: Any, job: Any) -> Any:
        """(Executor thread.) The result of the attempt a worker is starting: RUNNING, one
        worker id per attempt (so ``TaskContext.attempt`` is the row's attempt count)."""
        found = results.get_result(job.id, using=job.database or None)
        result = self._task_result(task, found, status=tf.TaskResultStatus.RUNNING)
        worker_ids = result.worker_ids[: job.attempts]
        worker_ids += [found.worker_ids[-1] if found.worker_ids else ""] * (
            job.attempts - len(worker_ids)
        )
        object.__setattr__(result, "worker_ids", worker_ids)
        if found.started_at is None:  # a held job starting: its start is recorded shortly
            now = timezone.now()
            object.__setattr__(result, "last_attempted_at", now)
            object.__setattr__(result, "started_at", found.first_started_at or now)
        return result

    def _task_result(self, task: Any, found: results.JobResult, status: Any = None) -> Any:
        result = tf.TaskResult(
            task=dataclasses.replace(
                task,
                queue_name=found.queue,
                priority=found.priority,
                backend=self.alias,
                run_after=_deferred(task, found),
            ),
            id=str(found.id),
            status=status or _status(found),
            enqueued_at=found.enqueued_at,
            # Django's started_at is the first attempt's start, last_attempted_at the latest's
            started_at=found.first_started_at or found.started_at,
            last_attempted_at=found.started_at,
            finished_at=found.finished_at,
            args=found.args,
            kwargs=found.kwargs,
            backend=self.alias,
            errors=[_task_error(entry) for entry in found.errors],
            worker_ids=list(found.worker_ids),
        )
        if found.status == "successful":
            object.__setattr__(result, "_return_value", found.return_value)
        return result


def _send_when_committed(sender: type, result: Any, alias: str) -> None:
    """Django's ``task_enqueued`` once the task's row is committed: at the commit of the
    caller's ``transaction.atomic()`` on the jobs database (never if it rolls back), at once in
    autocommit. Under manual transaction management Django cannot tell when the caller will
    commit: sent at once. A receiver that raises is logged (``django.dispatch``): the task is
    enqueued by then, its exception would fail a commit that happened."""

    def send() -> None:
        tf.task_enqueued.send_robust(sender, task_result=result)

    connection = db.jobs_connection(alias)
    if connection.get_autocommit() or (connection.in_atomic_block and connection.commit_on_exit):
        connection.on_commit(send)
    else:
        send()


def _status(found: results.JobResult) -> Any:
    """A held row (``running``, its start not recorded) has not started: READY."""
    if found.status == "running" and found.started_at is None:
        return tf.TaskResultStatus.READY
    return _STATUSES[found.status]


def _deferred(task: Any, found: results.JobResult) -> Any:
    """When the row may run next, if that is later than it was enqueued (a deferred task, or one
    waiting for a retry); else the task's own ``run_after``."""
    if found.run_after is not None and found.run_after > found.enqueued_at:
        return found.run_after
    return task.run_after


def _task_error(entry: dict) -> Any:
    kind = str(entry.get("type") or "Exception")
    return tf.TaskError(
        exception_class_path=kind if "." in kind else f"builtins.{kind}",
        traceback=str(entry.get("traceback") or entry.get("message") or ""),
    )


def _result_id(job_id: int, alias: str | None) -> str:
    """A task result's id: the job's id, followed by ``@alias`` for a job on another database
    than ``PGJOBS["DATABASE"]`` (a queue of ``QUEUE_DATABASES``: each database numbers its own)."""
    return str(job_id) if alias in (None, get_config().DATABASE) else f"{job_id}@{alias}"


def _job_id(result_id: Any) -> tuple[int, str | None]:
    """The job's id and its database (None: ``PGJOBS["DATABASE"]``) of a result id."""
    if isinstance(result_id, int) and not isinstance(result_id, bool):
        return result_id, None
    if isinstance(result_id, str) and result_id.isascii():
        number, at, alias = result_id.partition("@")
        if number.isdigit() and (not at or alias in job_databases()):
            return int(number), alias or None
    raise tf.TaskResultDoesNotExist(result_id)


def _options(options: Any) -> tuple[int | None, RetryPolicy | None, float | None, bool | None]:
    if not isinstance(options, dict):
        raise TypeError(f"OPTIONS must be a dict, not {type(options).__name__}")
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(
            f"unknown OPTIONS {', '.join(map(repr, unknown))}; known: {', '.join(OPTION_NAMES)}"
        )
    max_attempts = options.get("MAX_ATTEMPTS")
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    retry = options.get("RETRY")
    if retry is not None:
        if not isinstance(retry, dict):
            raise TypeError("OPTIONS['RETRY'] must be a dict of RetryPolicy fields")
        fields = {field.name for field in dataclasses.fields(RetryPolicy)}
        if set(retry) - fields:
            raise ValueError(
                f"OPTIONS['RETRY'] takes {', '.join(sorted(fields))}, not "
                f"{', '.join(sorted(set(retry) - fields))}"
            )
        retry = RetryPolicy(**retry)
    lease_seconds = options.get("LEASE_SECONDS")
    if lease_seconds is not None:
        lease_seconds = check_positive_seconds("LEASE_SECONDS", lease_seconds)
    atomic = options.get("ATOMIC")
    if atomic is not None and not isinstance(atomic, bool):
        raise TypeError(f"OPTIONS['ATOMIC'] must be True or False, not {atomic!r}")
    return max_attempts, retry, lease_seconds, atomic


def pgjobs_backend(alias: str) -> PgJobsBackend:
    """The ``PgJobsBackend`` configured as ``TASKS[alias]``; ``NotATask`` otherwise."""
    try:
        backend = tf.task_backends[alias]
    except Exception as error:  # noqa: BLE001 - InvalidTaskBackend, or a backend failing to load
        raise NotATask(f"TASKS has no usable backend {alias!r}: {error}") from None
    if not isinstance(backend, PgJobsBackend):
        raise NotATask(f"TASKS[{alias!r}] is {type(backend).__name__}, not a PgJobsBackend")
    return backend


def discover_task_modules() -> None:
    """Import every installed app's ``tasks`` module when a ``TASKS`` backend is a
    ``PgJobsBackend`` (at start-up, from ``AppConfig.ready``): task rows run, and
    ``get_result()`` reads, only tasks of modules imported by then (``task_rows.find_task``)."""
    for params in getattr(settings, "TASKS", {}).values():
        try:
            backend_class = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError):
            continue  # the Tasks framework reports it when the backend is used
        if isinstance(backend_class, type) and issubclass(backend_class, PgJobsBackend):
            autodiscover_modules("tasks")
            return


def definition_for_row(job: Any) -> JobDefinition:
    """(Worker.) The definition to run a task row with: ``NotATask`` when its backend alias is
    not a ``PgJobsBackend`` or its name is not the module path of a Task."""
    backend = pgjobs_backend(job.task_backend)
    task = find_task(job.name)
    if task.backend != backend.alias:
        task = dataclasses.replace(task, backend=backend.alias)  # as enqueued with .using()
    return backend.definition(task)
