"""``django_pgjobs.backend.PgJobsBackend``: unmodified ``django.tasks`` functions
(testproject/handlers/tasks.py) enqueued in the caller's transaction and run by real ``runjobs``
processes, on Django 6 (``django.tasks``) and Django 5.2 (the ``django_tasks`` backport)."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from helpers import wait_until

from django_pgjobs import operations
from django_pgjobs import taskframework as tf
from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter

if not tf.AVAILABLE:
    pytest.skip(
        "no Tasks framework: Django 6, or the django-tasks backport on Django 5.2",
        allow_module_level=True,
    )

from testproject.handlers import tasks  # noqa: E402 - needs the Tasks framework

pytestmark = pytest.mark.django_db(transaction=True)

Status = tf.TaskResultStatus


def run_tasks(start_worker) -> str:
    worker = start_worker("--queue", "tasks", "--burst")
    assert worker.wait(timeout=90) == 0, worker.output()
    return worker.output()


def run_until_finished(start_worker, task, result_id: str):
    """Run a worker (retries included) until the task's result is finished; return it."""
    worker = start_worker("--queue", "tasks")
    wait_until(lambda: task.get_result(result_id).is_finished or worker.popen.poll() is not None)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    return task.get_result(result_id), worker.output()


def test_rolled_back_task_is_gone_committed_task_runs(start_worker):
    Counter.objects.create(name="ada", value=1)
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = tasks.add_points.enqueue("ada", 100)
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = tasks.add_points.enqueue("ada", 2)
        assert committed.status == Status.READY
        # written in the caller's transaction: there before the commit, no on_commit involved
        assert tasks.add_points.get_result(committed.id).status == Status.READY
    with pytest.raises(tf.TaskResultDoesNotExist):
        tasks.add_points.get_result(rolled_back.id)

    output = run_tasks(start_worker)

    result = tasks.add_points.get_result(committed.id)
    assert result.status == Status.SUCCESSFUL, output
    assert result.return_value == 3 == Counter.objects.get(name="ada").value
    assert result.is_finished and result.errors == [] and result.attempts == 1
    assert len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert (result.args, result.kwargs, result.backend) == (["ada", 2], {}, "default")
    assert result.task.func is tasks.add_points.func
    committed.refresh()
    assert committed.status == Status.SUCCESSFUL and committed.return_value == 3


def test_failing_task_is_failed_with_its_traceback_after_its_attempts(start_worker):
    enqueued = tasks.refuse.enqueue("no thanks")
    result, output = run_until_finished(start_worker, tasks.refuse, enqueued.id)
    assert result.status == Status.FAILED, output
    assert result.attempts == 3  # OPTIONS["MAX_ATTEMPTS"]
    assert len(result.errors) == 3
    for error in result.errors:
        assert error.exception_class_path == "builtins.ValueError"
        assert error.exception_class is ValueError
        assert "Traceback (most recent call last)" in error.traceback
        assert "raise ValueError(reason)" in error.traceback
        assert "ValueError: no thanks" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert DeadLetter.objects.get(job_id=int(enqueued.id)).task_backend == "default"


def test_async_task_runs(start_worker):
    enqueued = tasks.shout.enqueue("quiet")
    run_tasks(start_worker)
    result = tasks.shout.get_result(enqueued.id)
    assert (result.status, result.return_value) == (Status.SUCCESSFUL, "QUIET")
    # and read back from async code
    assert async_to_sync(tasks.shout.aget_result)(enqueued.id).return_value == "QUIET"


def test_run_after_defers(start_worker):
    later = timezone.now() + timedelta(hours=1)
    deferred = tasks.greet.using(run_after=later).enqueue("Ada")
    due = tasks.greet.enqueue("Bob", punctuation="?")
    run_tasks(start_worker)
    assert tasks.greet.get_result(due.id).return_value == "Hello, Bob?"
    waiting = tasks.greet.get_result(deferred.id)
    assert waiting.status == Status.READY and waiting.task.run_after == later
    Job.objects.filter(id=int(deferred.id)).update(run_after=timezone.now())
    run_tasks(start_worker)
    assert tasks.greet.get_result(deferred.id).return_value == "Hello, Ada!"


def test_context_attempt_is_the_rows_attempt_count(start_worker):
    enqueued = tasks.succeed_on_attempt.enqueue(2)
    result, _ = run_until_finished(start_worker, tasks.succeed_on_attempt, enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == {"attempt": 2, "id": enqueued.id}
    assert result.attempts == 2 and len(result.errors) == 1
    assert result.errors[0].exception_class_path == "builtins.RuntimeError"


def test_started_at_is_the_first_attempts_start(start_worker):
    """Django's ``started_at`` is when the first attempt started; ``last_attempted_at`` the
    latest's."""
    enqueued = tasks.succeed_on_attempt.enqueue(2)
    result, _ = run_until_finished(start_worker, tasks.succeed_on_attempt, enqueued.id)
    assert result.status == Status.SUCCESSFUL and result.attempts == 2
    failed_at = result.errors[0]
    first_failure = parse_datetime(Job.objects.get(pk=enqueued.id).errors[0]["at"])
    assert result.started_at < first_failure < result.last_attempted_at
    assert failed_at.exception_class_path == "builtins.RuntimeError"


def test_a_task_row_runs_only_a_task(start_worker, tmp_path):
    """A row marked as a task names anything (the table is writable): only a Task of a
    PgJobsBackend runs; every other row is dead-lettered and nothing it names is called."""
    marker = tmp_path / "called"
    forged = {
        "os.system": ("default", [f"touch {marker}"]),  # a callable, not a Task
        "testproject.handlers.results.count_words": ("default", ["x"]),  # a @job, not a Task
        "nowhere.at_all": ("default", []),  # not importable
        "testproject.handlers.tasks.greet": ("elsewhere", ["Ada"]),  # alias not in TASKS
    }
    for name, (alias, args) in forged.items():
        Job.objects.create(name=name, queue="tasks", args=args, task_backend=alias)
    # a native row naming a task's path: the registry rule, the task is not run either
    Job.objects.create(name="testproject.handlers.tasks.greet", queue="tasks", args=["Bob"])

    output = run_tasks(start_worker)

    assert not marker.exists()
    assert not Job.objects.exists(), output
    dead = {d.name + "@" + d.task_backend: d for d in DeadLetter.objects.all()}
    assert len(dead) == 5
    for name, (alias, _) in forged.items():
        letter = dead[f"{name}@{alias}"]
        assert letter.error_type == "NotATask" and letter.reason.startswith("not a task: ")
        assert letter.attempts == 1
    assert "not a django" in dead["os.system@default"].reason.replace("_", ".")
    assert "is not in a loaded module" in dead["nowhere.at_all@default"].reason
    assert (
        "no usable backend 'elsewhere'" in dead["testproject.handlers.tasks.greet@elsewhere"].reason
    )
    assert dead["testproject.handlers.tasks.greet@"].error_type == "UnknownJob"


def test_a_return_value_json_cannot_hold_fails_the_task_once_with_result_not_json(start_worker):
    """A datetime, a Decimal, a set: the same clear ResultNotJSON as a @job gets, and FAILED at
    once (the task did its work; a retry would do it again and fail the same way)."""
    kinds = ("datetime", "decimal", "set")
    for kind in kinds:
        Counter.objects.create(name=kind, value=0)
    enqueued = {kind: tasks.add_points_returning.enqueue(kind, 5, kind) for kind in kinds}
    worker = start_worker("--queue", "tasks")
    wait_until(
        lambda: (
            all(r.refresh() or r.is_finished for r in enqueued.values())
            or worker.popen.poll() is not None
        )
    )
    time.sleep(0.5)  # a retry (0.1 s backoff) would have run by now
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    described = {
        "datetime": "datetime.datetime",
        "decimal": "decimal.Decimal",
        "set": "builtins.set",
    }
    for kind, result in enqueued.items():
        result.refresh()
        assert result.status == Status.FAILED, worker.output()
        assert Counter.objects.get(name=kind).value == 5  # ran once
        (error,) = result.errors
        assert error.exception_class_path == "django_pgjobs.payload.ResultNotJSON"
        assert f"the return value is a {described[kind]}, which is not JSON" in error.traceback
        assert "Unsupported type" not in error.traceback
        letter = DeadLetter.objects.get(job_id=int(result.id))
        assert letter.attempts == 1 and letter.max_attempts == 3
        assert letter.reason.startswith("its result cannot be stored, not retried")


def test_requeued_dead_task_runs_as_a_task_again(start_worker):
    enqueued = tasks.greet.enqueue("Ada")
    Job.objects.filter(id=int(enqueued.id)).update(args=[])  # arguments that no longer fit
    run_tasks(start_worker)
    letter = DeadLetter.objects.get(job_id=int(enqueued.id))
    assert letter.error_type == "BadArguments" and letter.task_backend == "default"
    DeadLetter.objects.filter(id=letter.id).update(args=["Ada"])
    (new_id,) = operations.requeue_dead_letters(connection, [letter.id])
    run_tasks(start_worker)
    assert tasks.greet.get_result(str(new_id)).return_value == "Hello, Ada!"


def test_worker_sends_task_started_and_finished_and_logs_them(start_worker):
    ok = tasks.greet.enqueue("Ada")
    failing = tasks.refuse.using(priority=-1).enqueue("nope")
    result, output = run_until_finished(start_worker, tasks.refuse, failing.id)
    assert result.status == Status.FAILED
    path = "testproject.handlers.tasks"
    # Django's own receivers log each signal (django.tasks / django_tasks logger)
    assert f"Task id={ok.id} path={path}.greet state=RUNNING" in output
    assert f"Task id={ok.id} path={path}.greet state=SUCCESSFUL" in output
    assert output.count(f"Task id={failing.id} path={path}.refuse state=RUNNING") == 3
    assert output.count(f"Task id={failing.id} path={path}.refuse state=FAILED") == 3
    assert "ValueError: nope" in output  # logged with the exception


def test_admin_lists_tasks_by_name(admin_client):
    tasks.greet.enqueue("Ada")
    page = admin_client.get("/admin/django_pgjobs/job/")
    assert page.status_code == 200
    assert "testproject.handlers.tasks.greet" in page.content.decode()


def test_the_how_to_example(start_worker):
    from testproject.handlers.task_calls import award, points_after

    result_id = award("grace", 7)
    assert points_after(result_id) is None
    run_tasks(start_worker)
    assert points_after(result_id) == 7


@pytest.mark.parametrize("name", ["add_points_failing_first", "aadd_points_failing_first"])
def test_an_atomic_backend_rolls_a_failed_attempts_writes_back(start_worker, name):
    """OPTIONS["ATOMIC"]: each attempt and the row's completion commit together, so the write of
    the failed first attempt is undone and the task's points land once; through the default
    backend the same task's first write stays. Real runjobs processes run both. An async def
    task too: its ORM calls run on the executor thread that holds the transaction."""
    Counter.objects.create(name="plain", value=0)
    Counter.objects.create(name="atomic", value=0)
    task = getattr(tasks, name)
    plain = task.enqueue("plain", 5)
    atomic = task.using(backend="atomic").enqueue("atomic", 5)
    assert atomic.backend == "atomic"
    worker = start_worker("--queue", "tasks")
    wait_until(
        lambda: (
            all(r.refresh() or r.is_finished for r in (plain, atomic))
            or worker.popen.poll() is not None
        ),
        timeout=60,
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    for result, points in ((plain, 10), (atomic, 5)):
        assert result.status == Status.SUCCESSFUL, worker.output()
        assert result.attempts == 2 and len(result.errors) == 1
        assert "the first attempt fails after its write" in result.errors[0].traceback
        assert result.return_value == points
    assert Counter.objects.get(name="plain").value == 10  # the failed attempt's write stayed
    assert Counter.objects.get(name="atomic").value == 5  # rolled back with its attempt
    assert Job.objects.get(id=int(atomic.id)).task_backend == "atomic"
