"""What Django's own tests require of a task backend (django/django ``tests/tasks/``), checked
against ``PgJobsBackend``: validation of priority, queue and ``run_after``, module-level
functions, JSON normalisation of arguments, ``TaskResultDoesNotExist``, ``TaskResultMismatch``,
the ``task_enqueued`` signal and its log line; and the backend's configuration errors."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_pgjobs import taskframework as tf
from django_pgjobs.models import Job
from testproject.handlers.results import count_words

if not tf.AVAILABLE:
    pytest.skip(
        "no Tasks framework: Django 6, or the django-tasks backport on Django 5.2",
        allow_module_level=True,
    )

from testproject.handlers import tasks  # noqa: E402 - needs the Tasks framework

pytestmark = pytest.mark.django_db(transaction=True)
PGJOBS_BACKEND = "django_pgjobs.backend.PgJobsBackend"
LOGGER = "django.tasks" if tf.FRAMEWORK == "django.tasks" else "django_tasks"


def backend(alias: str = "default"):
    return tf.task_backends[alias]


def task(**options):
    if tf.FRAMEWORK == "django.tasks":
        from django.tasks import task as decorator
    else:
        from django_tasks import task as decorator
    return decorator(**options)


def test_backend_features():
    used = backend()
    assert type(used).__module__ + "." + type(used).__name__ == PGJOBS_BACKEND
    assert used.supports_defer and used.supports_priority
    assert used.supports_get_result and used.supports_async_task


def test_enqueue_writes_the_options_onto_the_row():
    later = timezone.now() + timedelta(minutes=5)
    result = tasks.greet.using(priority=-7, run_after=later).enqueue("Ada", punctuation=".")
    assert result.status == tf.TaskResultStatus.READY
    assert (result.started_at, result.finished_at, result.worker_ids) == (None, None, [])
    assert result.enqueued_at is not None and result.backend == "default"
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    row = Job.objects.get(id=int(result.id))
    assert (row.name, row.queue, row.priority, row.run_after) == (
        "testproject.handlers.tasks.greet",
        "tasks",
        -7,
        later,
    )
    assert (row.args, row.kwargs, row.task_backend, row.keep_result) == (
        ["Ada"],
        {"punctuation": "."},
        "default",
        True,
    )
    assert (row.max_attempts, row.status) == (3, "ready")  # OPTIONS["MAX_ATTEMPTS"]


def test_arguments_are_normalised_to_json_and_others_refused():
    result = tasks.greet.enqueue(("a", "tuple"), punctuation="!")
    assert result.args == [["a", "tuple"]]
    assert tasks.greet.get_result(result.id).args == [["a", "tuple"]]
    before = Job.objects.count()
    with pytest.raises(TypeError):
        tasks.greet.enqueue(datetime.now())
    with pytest.raises(TypeError):
        tasks.greet.enqueue({1, 2})
    assert Job.objects.count() == before  # nothing written


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_priority_outside_the_range_is_invalid(priority):
    with pytest.raises(tf.InvalidTask):
        tasks.greet.using(priority=priority)
    assert not Job.objects.exists()


def test_queue_not_in_the_backends_queues_is_invalid_and_the_error_names_the_fix():
    fix = (
        "queue 'elsewhere' of task testproject.handlers.tasks.greet is not in "
        "TASKS['default']['QUEUES'] (default, tasks): add it there, or leave QUEUES out to "
        "accept any queue"
    )
    with pytest.raises(tf.InvalidTask, match=re.escape(fix)):
        tasks.greet.using(queue_name="elsewhere")
    with pytest.raises(tf.InvalidTask, match="add it there, or leave QUEUES out"):
        task(queue_name="elsewhere")(tasks.greet.func)


@override_settings(TASKS={"default": {"BACKEND": PGJOBS_BACKEND}})  # as the README shows it
def test_without_queues_a_task_may_use_any_queue():
    emails = task(queue_name="emails")(tasks.greet.func)
    assert emails.queue_name == "emails"
    assert tasks.greet.using(queue_name="reports").enqueue("x").task.queue_name == "reports"
    assert Job.objects.get().queue == "reports"
    with pytest.raises(tf.InvalidTask, match="queue"):
        tasks.greet.using(queue_name="bad queue")


@override_settings(
    TASKS={"default": {"BACKEND": PGJOBS_BACKEND, "QUEUES": []}}  # empty: any queue
)
def test_queue_must_still_be_a_valid_queue_name():
    assert tasks.greet.using(queue_name="anything").queue_name == "anything"
    with pytest.raises(tf.InvalidTask, match="queue"):
        tasks.greet.using(queue_name="x" * 200)


def test_run_after_must_be_aware():
    naive = datetime.now() + timedelta(hours=1)  # noqa: DTZ005
    with pytest.raises(tf.InvalidTask, match="aware"):
        tasks.greet.using(run_after=naive)


def test_functions_must_be_module_level():
    def inner():
        return None

    with pytest.raises(tf.InvalidTask, match="module level"):
        task()(inner)
    with pytest.raises(tf.InvalidTask, match="module level"):
        task()(lambda: None)


def test_takes_context_needs_a_context_parameter():
    with pytest.raises(tf.InvalidTask, match="context"):
        task(takes_context=True)(tasks.greet.func)


def test_missing_results_do_not_exist():
    for missing in ["123456", "not-a-number", "", "-1", "١٢"]:
        with pytest.raises(tf.TaskResultDoesNotExist):
            backend().get_result(missing)
    with pytest.raises(tf.TaskResultDoesNotExist):
        async_to_sync(backend().aget_result)("123456")
    # a @job row is not a task result
    job = count_words.enqueue("not a task")
    with pytest.raises(tf.TaskResultDoesNotExist):
        backend().get_result(str(job.id))


def test_result_of_another_task_is_a_mismatch():
    result = tasks.greet.enqueue("Ada")
    assert backend().get_result(result.id).task.func is tasks.greet.func
    with pytest.raises(tf.TaskResultMismatch):
        tasks.add_points.get_result(result.id)
    with pytest.raises(tf.TaskResultMismatch):
        async_to_sync(tasks.add_points.aget_result)(result.id)


def test_aenqueue_and_refresh():
    result = async_to_sync(tasks.greet.aenqueue)("Ada")
    assert tasks.greet.get_result(result.id).args == ["Ada"]
    # running: claimed and started (a claimed row whose start is not recorded is only held)
    Job.objects.filter(id=int(result.id)).update(
        status="running", worker="w1", attempts=1, started_at=timezone.now()
    )
    result.refresh()
    assert result.status == tf.TaskResultStatus.RUNNING and result.worker_ids == ["w1"]


def test_task_enqueued_signal_and_log(caplog):
    received = []

    def receiver(sender, task_result, **kwargs):
        received.append((sender, task_result))

    tf.task_enqueued.connect(receiver)
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            result = tasks.greet.enqueue("Ada")
    finally:
        tf.task_enqueued.disconnect(receiver)
    ((sender, sent),) = received
    assert sender is type(backend()) and sent is result
    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert f"id={result.id}" in line and "enqueued" in line


@pytest.fixture
def enqueued_signals():
    """The ids of the task results ``task_enqueued`` is sent for, in order."""
    received: list[str] = []

    def receiver(sender, task_result, **kwargs):
        received.append(task_result.id)

    tf.task_enqueued.connect(receiver)
    yield received
    tf.task_enqueued.disconnect(receiver)


def test_task_enqueued_is_sent_when_the_row_is_committed(enqueued_signals):
    with transaction.atomic():
        committed = tasks.greet.enqueue("Ada")
        assert enqueued_signals == []  # the caller may still roll back
    assert enqueued_signals == [committed.id]
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.greet.enqueue("Bob")
        raise RuntimeError("roll back")
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint rolled back
            tasks.greet.enqueue("Cy")
            raise RuntimeError("roll back the savepoint")
        kept = tasks.greet.enqueue("Di")
    assert enqueued_signals == [committed.id, kept.id]
    assert Job.objects.count() == 2
    at_once = tasks.greet.enqueue("Eve")  # autocommit: committed by the INSERT
    assert enqueued_signals[-1] == at_once.id


def test_task_enqueued_under_manual_transactions_is_sent_at_once(enqueued_signals):
    transaction.set_autocommit(False)
    try:
        enqueued = tasks.greet.enqueue("Ada")
        assert enqueued_signals == [enqueued.id]  # Django cannot tell when the caller commits
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert enqueued_signals == [enqueued.id]


def test_a_task_enqueued_receiver_that_raises_fails_neither_enqueue_nor_commit(caplog):
    def failing(sender, task_result, **kwargs):
        raise RuntimeError("receiver failed")

    tf.task_enqueued.connect(failing)
    try:
        with transaction.atomic():
            enqueued = tasks.greet.enqueue("Ada")
    finally:
        tf.task_enqueued.disconnect(failing)
    assert Job.objects.filter(id=int(enqueued.id)).exists()
    assert "receiver failed" in caplog.text


def test_a_result_reports_the_alias_it_was_enqueued_through():
    enqueued = tasks.greet.using(backend="atomic").enqueue("Ada")
    for reader in ("default", "atomic"):
        result = backend(reader).get_result(enqueued.id)
        assert (result.backend, result.task.backend) == ("atomic", "atomic"), reader
    assert tasks.greet.get_result(enqueued.id).backend == "atomic"  # read through "default"
    plain = tasks.greet.enqueue("Bob")
    assert backend("atomic").get_result(plain.id).backend == "default"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"RETRIES": 3}, "unknown OPTIONS 'RETRIES'"),
        ({"MAX_ATTEMPTS": 0}, "max_attempts"),
        ({"RETRY": {"base_seconds": -1}}, "base_seconds"),
        ({"RETRY": {"delay": 1}}, "OPTIONS\\['RETRY'\\] takes"),
        ({"LEASE_SECONDS": 0}, "LEASE_SECONDS"),
        ({"ATOMIC": "yes"}, "ATOMIC"),
    ],
)
def test_bad_options_are_a_configuration_error(options, message):
    with override_settings(TASKS={"default": {"BACKEND": PGJOBS_BACKEND, "OPTIONS": options}}):
        with pytest.raises(ImproperlyConfigured, match=message):
            backend()


def test_bad_queue_names_are_a_configuration_error():
    with override_settings(TASKS={"default": {"BACKEND": PGJOBS_BACKEND, "QUEUES": [""]}}):
        with pytest.raises(ImproperlyConfigured, match="TASKS\\['default'\\]"):
            backend()
