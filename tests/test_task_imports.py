"""Task rows never make a process import a module (invariant 8): a row names a task by its
module path, and anyone who can write the table can write any path. A task runs only if its
module was imported at start-up (an installed app's ``tasks`` or ``jobs`` module, a module of
``PGJOBS["JOB_MODULES"]``, or one they import), by real ``runjobs`` processes, and
``get_result()`` in this process follows the same rule."""

from __future__ import annotations

import importlib
import os
import sys
import uuid

import pytest

from django_pgjobs import taskframework as tf
from django_pgjobs.models import DeadLetter, Job

if not tf.AVAILABLE:
    pytest.skip(
        "no Tasks framework: Django 6, or the django-tasks backport on Django 5.2",
        allow_module_level=True,
    )

from testproject.handlers import tasks  # noqa: E402 - needs the Tasks framework

pytestmark = pytest.mark.django_db(transaction=True)

TASK_IMPORT = """
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A directory on sys.path here, and on the PYTHONPATH of the workers ``env`` starts."""
    directory = tmp_path / "modules"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


def worker_env(modules, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, **extra}


def run_tasks(start_worker, env: dict[str, str]) -> str:
    worker = start_worker("--queue", "tasks", "--burst", env=env)
    assert worker.wait(timeout=90) == 0, worker.output()
    return worker.output()


def test_a_forged_task_row_imports_nothing_in_the_worker_nor_in_get_result(
    start_worker, modules, tmp_path
):
    marker = tmp_path / "imported"
    name = f"forged_{uuid.uuid4().hex}"
    (modules / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('module code ran')\n"
        f"{TASK_IMPORT}\n\n@task(queue_name='tasks')\ndef run() -> None:\n    pass\n"
    )
    forged = Job.objects.create(name=f"{name}.run", queue="tasks", task_backend="default")

    with pytest.raises(tf.TaskResultDoesNotExist, match="is not in a loaded module"):
        tasks.greet.get_backend().get_result(str(forged.id))
    assert not marker.exists() and name not in sys.modules

    output = run_tasks(start_worker, worker_env(modules))

    assert not marker.exists(), output
    letter = DeadLetter.objects.get(job_id=forged.id)
    assert (letter.error_type, letter.attempts) == ("NotATask", 1)
    assert letter.reason.startswith(f"not a task: '{name}.run' is not in a loaded module")
    assert "a row never makes a process import a module" in letter.reason
    with pytest.raises(tf.TaskResultDoesNotExist):  # the dead letter: still nothing imported
        tasks.greet.get_backend().get_result(str(forged.id))
    assert not marker.exists() and name not in sys.modules


def test_tasks_of_modules_imported_at_start_up_run(start_worker, modules):
    """An app's tasks module (testproject/handlers/tasks.py, an installed app's), a module of
    PGJOBS["JOB_MODULES"] and a module that one imports: their tasks run, nothing else does."""
    listed, imported = f"listed_{uuid.uuid4().hex}", f"imported_{uuid.uuid4().hex}"
    (modules / f"{imported}.py").write_text(
        f"{TASK_IMPORT}\n\n@task(queue_name='tasks')\ndef double(n: int) -> int:\n"
        "    return 2 * n\n"
    )
    (modules / f"{listed}.py").write_text(
        f"{TASK_IMPORT}\nimport {imported}  # noqa: F401\n\n\n@task(queue_name='tasks')\n"
        "def triple(n: int) -> int:\n    return 3 * n\n"
    )
    enqueued = [
        (tasks.greet.enqueue("Ada"), "Hello, Ada!"),
        (importlib.import_module(listed).triple.enqueue(2), 6),
        (importlib.import_module(imported).double.enqueue(3), 6),
    ]

    output = run_tasks(start_worker, worker_env(modules, PGJOBS_TEST_JOB_MODULES=listed))

    for result, value in enqueued:
        result.refresh()
        assert (result.status, result.return_value) == (tf.TaskResultStatus.SUCCESSFUL, value), (
            output
        )
