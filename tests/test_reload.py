"""``runjobs --reload``: a real worker under Django's autoreloader. Editing a job module restarts
it; the new code runs the jobs enqueued since, the old worker finishes its running job and hands
back the jobs it held, and no job is lost or run twice."""

from __future__ import annotations

import importlib
import os
import signal
import time
import uuid

import pytest
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job, Worker
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution

pytestmark = pytest.mark.django_db(transaction=True)

JOB_MODULE = """
from django_pgjobs import job
from testproject.demo.jobs import _record


@job
def probe(label: str) -> None:
    _record(label + "-{version}")
"""


def labels() -> list[str]:
    return sorted(Execution.objects.values_list("label", flat=True))


def edit(path, version: str) -> None:
    path.write_text(JOB_MODULE.format(version=version))
    later = time.time() + 2  # a modification time the reloader cannot take for the old one
    os.utime(path, (later, later))


@pytest.mark.alone  # the autoreloader polls files once a second: starved under load, it failed once
def test_editing_a_job_module_restarts_the_worker_and_loses_no_job(start_worker, tmp_path):
    modules = tmp_path / "modules"
    modules.mkdir()
    name = f"reloaded_{uuid.uuid4().hex}"
    path = modules / f"{name}.py"
    edit(path, "v1")
    importlib.invalidate_caches()
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(modules))
        probe = importlib.import_module(name).probe
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])),
        "PGJOBS_TEST_JOB_MODULES": name,
        "PGJOBS_TEST_RELOAD_WATCH": f"{name}.py",  # testproject/settings.py
    }
    worker = start_worker("--reload", "--concurrency", "1", "--prefetch", "4", env=env)
    probe.enqueue("first")
    wait_until(lambda: labels() == ["first-v1"], timeout=60, interval=0.05)
    # The reloader compares each file's modification time with the one it saw first: an edit
    # made before its first look at the file is never a change. (In a run of the whole suite the
    # worker once never reloaded within a minute of the edit, its log silent, which is what an
    # edit before that first look gives; not seen since the test waits for it.)
    wait_until(lambda: f"{name}.py first seen with mtime" in worker.output(), timeout=60)

    # a job running and others held (claimed ahead of the one slot) when the code changes
    demo.record.enqueue("running", sleep=1.5)
    wait_until(lambda: Job.objects.filter(status="running").exists(), interval=0.02)
    probe.enqueue_many([(f"held-{i}",) for i in range(4)])
    wait_until(
        lambda: Job.objects.filter(status="running", started_at__isnull=True).exists(),
        timeout=10,
        interval=0.02,
    )
    edit(path, "v2")

    expected = sorted(["first-v1", "running"] + [f"held-{i}-v2" for i in range(4)])
    try:
        wait_until(lambda: labels() == expected, timeout=60, interval=0.05)
    except AssertionError:
        pytest.fail(f"ran {labels()}, expected {expected}:\n{worker.output()}")
    # the last job's row goes with its acknowledgement, a moment after its run recorded it
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    assert not DeadLetter.objects.exists()
    output = worker.output()
    assert "changed: stopping the worker before reloading" in output, output
    assert "released=4" in output, output  # the old worker handed back what it held

    # SIGTERM to the worker's process (the reloader's child) stops it and the reloader
    (child,) = Worker.objects.exclude(pid=worker.pid).values_list("pid", flat=True)
    os.kill(child, signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output()
    assert not Worker.objects.exists()


@pytest.mark.parametrize("stop", ["sigterm-to-the-first-process", "ctrl-c-to-both"])
def test_sigterm_or_ctrl_c_stops_the_worker_gracefully(start_worker, stop):
    """``docker stop`` signals the first process, the reloader's: it passes the signal on and
    waits, so the running job finishes and the worker leaves the registry. (Django's own loop
    exited at once and killed the worker's process: its job stayed running until its lease.)
    Ctrl-C in a terminal signals the whole process group: the first process waits, and the
    worker's process stops as on SIGTERM. (The first process once ignored SIGINT, and its child
    inherited that: Ctrl-C did nothing.)

    The signal comes once the handler runs (it has written its metadata), and the job finishes
    only after it. Signalled as soon as the row said 'running', a loaded machine's worker had
    at times not yet handed the claimed job to its executor: handed back unstarted, as it
    should be, which is not what this test is about."""
    Counter.objects.create(name="reload-stop", value=0)
    queued = demo.stepwise.enqueue("reload-stop", 1)
    worker = start_worker("--reload", "--concurrency", "1")
    wait_until(lambda: Job.objects.get(pk=queued.pk).metadata, timeout=60, interval=0.02)
    if stop == "ctrl-c-to-both":
        os.killpg(worker.popen.pid, signal.SIGINT)  # the test made it a group of its own
    else:
        worker.signal(signal.SIGTERM)
    time.sleep(0.5)  # the stop is under way while the job still runs
    assert worker.popen.poll() is None, worker.output()
    Counter.objects.filter(name="reload-stop").update(value=1)  # the job's one step is done
    assert worker.wait(timeout=30) == 0, worker.output()
    finished = Job.objects.get(pk=queued.pk)  # kept with its result (keep_result=True)
    assert (finished.status, finished.attempts, finished.result) == ("successful", 1, 1)
    assert "handed back" not in worker.output()
    assert not Worker.objects.exists()
