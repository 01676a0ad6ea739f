"""The worker's structure, read from its source: ``Worker`` is the composition root, and every
other part is built with the collaborators it uses, typed (docs/explanation/worker.md)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import django_pgjobs
from django_pgjobs.worker import Worker, WorkerOptions
from django_pgjobs.worker.holding import MAX_HELD

PACKAGE = Path(django_pgjobs.__file__).parent
WORKER = PACKAGE / "worker"
ROOT = {"loop.py", "__init__.py"}  # the composition root, and the package's exports


def parts() -> list[Path]:
    return sorted(path for path in WORKER.glob("*.py") if path.name not in ROOT)


def test_no_part_of_the_worker_receives_or_imports_the_worker():
    found = []
    for path in parts():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("loop", "worker.loop"):
                found.append(f"{path.name}:{node.lineno} imports the composition root")
            if isinstance(node, ast.arg) and node.arg == "worker":
                found.append(f"{path.name}:{node.lineno} takes a `worker` argument")
            if isinstance(node, ast.Attribute) and node.attr == "worker":
                found.append(f"{path.name}:{node.lineno} reaches `.worker`")
            if isinstance(node, ast.Name) and node.id == "Worker":
                found.append(f"{path.name}:{node.lineno} names `Worker`")
    assert found == []


def test_every_part_constructor_says_what_it_takes():
    untyped = []
    for path in parts():
        tree = ast.parse(path.read_text())
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for method in cls.body:
                if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                    arguments = method.args.args[1:] + method.args.kwonlyargs
                    untyped += [
                        f"{path.name}: {cls.name}({argument.arg})"
                        for argument in arguments
                        if argument.annotation is None
                    ]
    assert untyped == []


def test_the_worker_is_built_from_one_validated_options_value():
    worker = Worker(listen=False, install_signal_handlers=False, concurrency=3)
    assert worker.options.concurrency == 3
    assert worker.slots.concurrency == 3 and worker.executors.concurrency == 3
    # the keyword options are WorkerOptions.build's, checked there
    parameters = inspect.signature(Worker.__init__).parameters
    assert list(parameters) == ["self", "options", "kwargs"]


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"concurrency": 0}, "concurrency must be an int >= 1, not 0"),
        ({"concurrency": True}, "concurrency must be an int >= 1"),
        ({"async_concurrency": 0}, "async_concurrency must be an int >= 1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"prefetch": -1}, "prefetch must be an int >= 0"),
        ({"max_jobs": 0}, "max_jobs must be an int >= 1"),
        ({"poll_interval": 0}, "poll_interval must be a number of seconds greater than 0"),
        ({"poll_interval": float("nan")}, "poll_interval must be a number of seconds"),
        ({"shutdown_grace": -1}, "shutdown_grace must be a number of seconds from 0"),
        ({"stats_interval": 0}, "stats_interval must be a number of seconds greater than 0"),
        ({"queues": "emails"}, "queues must be a list of queue names, not the string 'emails'"),
        ({"queues": ["bad queue"]}, "queue must be"),
    ],
)
def test_worker_options_out_of_range_are_refused_by_name(options, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        WorkerOptions.build(**options)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        Worker(**options)


def test_worker_options_fill_in_the_settings(settings):
    settings.PGJOBS = {**settings.PGJOBS, "POLL_INTERVAL_SECONDS": 0.5, "LISTEN_NOTIFY": False}
    options = WorkerOptions.build(queues=["b", "a"], shutdown_grace=0)
    assert options.queues == ("b", "a") and options.poll_interval == 0.5
    assert options.listen is False and options.shutdown_grace == 0.0
    assert options.prefetch is None and options.batch_size == MAX_HELD
    assert WorkerOptions.build(queues=[]).queues is None  # none named: every queue
