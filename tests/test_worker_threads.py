"""Thread ownership and database faults in the worker (django_pgjobs/worker/ownership.py,
faults.py): the dispatcher's structures refuse other threads; which errors are waited out."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from helpers import run_worker

from django_pgjobs import signals
from django_pgjobs.operations import ClaimedJob
from django_pgjobs.worker import Worker, WrongThread
from django_pgjobs.worker.faults import LoopBackoff, is_transient
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def a_claimed_job() -> ClaimedJob:
    now = timezone.now()
    return ClaimedJob(
        id=1,
        name=demo.record.name,
        queue="default",
        priority=0,
        args=[],
        kwargs={},
        attempts=1,
        max_attempts=3,
        run_after=now,
        created_at=now,
        claim_token=None,
    )


def test_an_executor_thread_cannot_touch_the_dispatchers_acknowledgements():
    """A signal receiver runs on the executor thread: acknowledging from there is refused."""
    refused = []

    def meddle(sender, job, **kwargs):
        try:
            running.acks.add(job)
        except WrongThread as error:
            refused.append(str(error))

    demo.record.enqueue("x")
    running = Worker(burst=True, listen=False, install_signal_handlers=False)
    signals.job_started.connect(meddle)
    try:
        assert running.run() == 0
    finally:
        signals.job_started.disconnect(meddle)
    assert running.stats.succeeded == 1
    assert refused and "only the dispatcher thread may" in refused[0]
    assert running.state.owner.ident is None  # released: the worker can be driven again


def test_the_failure_policy_refuses_other_threads_while_a_dispatcher_runs():
    worker = Worker(listen=False, install_signal_handlers=False)
    worker.state.owner.take()
    outcome = []

    def from_another_thread():
        try:
            worker.failures.record_failure(a_claimed_job(), ValueError("x"))
        except WrongThread:
            outcome.append("refused")

    thread = threading.Thread(target=from_another_thread)
    thread.start()
    thread.join()
    assert outcome == ["refused"]


def database_error(sql: str, *, read_only: bool = False) -> DatabaseError:
    with pytest.raises(DatabaseError) as caught:
        with transaction.atomic():
            with connection.cursor() as cursor:
                if read_only:
                    cursor.execute("SET TRANSACTION READ ONLY")
                cursor.execute(sql)
    return caught.value


def test_not_right_now_errors_are_waited_out_and_bugs_are_raised():
    canceled = database_error("SET LOCAL statement_timeout = 1; SELECT pg_sleep(1)")
    read_only = database_error("CREATE TEMP TABLE t (x int)", read_only=True)
    division = database_error("SELECT 1 / 0")
    missing = database_error("SELECT * FROM no_such_table")
    assert is_transient(canceled) and is_transient(read_only)
    assert not is_transient(division) and not is_transient(missing)

    backoff = LoopBackoff()
    assert [backoff.failed(canceled) for _ in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert backoff.failing
    backoff.reset()
    assert not backoff.failing
    with pytest.raises(DatabaseError):
        backoff.failed(division)


def test_the_worker_loop_runs_its_jobs_on_executor_threads_only():
    seen = []

    def note_thread(sender, **kwargs):
        seen.append(threading.current_thread().name)

    demo.record.enqueue("x")
    signals.job_started.connect(note_thread)
    try:
        run_worker()
    finally:
        signals.job_started.disconnect(note_thread)
    assert seen == ["pgjobs-executor-0"]


SIGNAL_WHILE_THE_INBOX_IS_LOCKED = """
import os, signal, django
django.setup()
from django_pgjobs.worker import Worker
worker = Worker(listen=False)
worker.signal_handlers.install()
with worker.inbox.queue.mutex:  # the dispatcher inside inbox.get(), holding its lock
    signal.raise_signal(signal.SIGTERM)  # the handler runs here, on this thread
print("stop requested:", worker.stop.requested.is_set(), "woken:", worker.inbox.queue.get(timeout=5))
"""


def test_sigterm_while_the_dispatcher_holds_its_inbox_lock_does_not_deadlock():
    """The handler runs on the dispatcher's thread between two bytecodes, possibly inside the
    inbox's ``get``: putting on the inbox from the handler waited for ever on its own lock
    (a worker that never exited after SIGTERM, seen in CI)."""
    import subprocess
    import sys

    from helpers import database_url_for_tests

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": database_url_for_tests(),
    }
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_THE_INBOX_IS_LOCKED],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "stop requested: True woken: <object object" in done.stdout
