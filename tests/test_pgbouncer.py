"""Behind PgBouncer in transaction mode, with the documented settings (docs/howto/deploy.md
#pgbouncer): enqueue in the caller's transaction, a real ``runjobs`` (polling), atomic jobs and
retries, and the admin's actions, every statement carried by a private PgBouncer
(tests/pgbouncer_support.py). ``.ci/run`` also runs the worker, enqueue and admin modules
through it."""

from __future__ import annotations

import signal

import pytest
from admin_data import dead_letter
from django.db import connection, transaction
from django.urls import reverse
from helpers import count, wait_until
from pgbouncer_support import WHOLE_RUN, PgBouncer

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.jobs import flaky, record, record_atomic
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_commits_and_rolls_back_with_the_caller(through_pgbouncer, other_connection):
    with transaction.atomic():
        record.enqueue("kept")
        # another session through PgBouncer sees nothing before the commit
        assert count(other_connection, "SELECT count(*) FROM pgjobs_job") == 0
    with transaction.atomic():
        record.enqueue("gone")
        transaction.set_rollback(True)
    assert count(other_connection, "SELECT count(*) FROM pgjobs_job") == 1
    assert through_pgbouncer.transactions(connection.settings_dict["NAME"]) > 0


def test_a_runjobs_worker_behind_pgbouncer_runs_every_job(through_pgbouncer, start_worker):
    database = connection.settings_dict["NAME"]
    for i in range(20):
        record.enqueue(f"plain-{i}")
        record_atomic.enqueue(f"atomic-{i}")
    flaky.enqueue("flaky", fail_times=1)  # a retry: its attempt fenced by its claim token
    before = through_pgbouncer.transactions(database)
    worker = start_worker("--concurrency", "4", "--poll-interval", "0.2")
    wait_until(lambda: not Job.objects.exists(), timeout=60)  # the retry included
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert "wake=poll" in worker.output()  # LISTEN_NOTIFY off: no LISTEN behind PgBouncer
    assert not DeadLetter.objects.exists()
    labels = sorted(Execution.objects.values_list("label", flat=True))
    assert labels.count("flaky") == 2 and len(labels) == 42
    assert through_pgbouncer.transactions(database) > before + 40  # carried by PgBouncer


def test_the_admins_actions_behind_pgbouncer(through_pgbouncer, admin_client):
    letter = dead_letter(queue="emails")
    response = admin_client.post(
        reverse("admin:django_pgjobs_deadletter_changelist"),
        {"action": "requeue", "_selected_action": [letter.id], "index": 0},
    )
    assert response.status_code == 302
    assert not DeadLetter.objects.exists() and Job.objects.get().queue == "emails"
    dashboard = admin_client.get(reverse("admin:django_pgjobs_job_dashboard"))
    assert dashboard.status_code == 200 and b"emails" in dashboard.content


@pytest.mark.skipif(
    not WHOLE_RUN, reason="the run goes through PgBouncer with PGJOBS_TEST_PGBOUNCER=1"
)
def test_the_whole_run_goes_through_pgbouncer():
    """``.ci/run``'s PgBouncer stage: Django's connection is PgBouncer's, which carries this
    test database's transactions."""
    port = int(connection.settings_dict["PORT"])
    bouncer = PgBouncer(port, None, None)  # the run's, started by pgbouncer_support
    database = connection.settings_dict["NAME"]
    before = bouncer.transactions(database)
    Job.objects.exists()
    assert bouncer.transactions(database) > before


def test_per_key_limits_hold_behind_pgbouncer(through_pgbouncer, start_worker):
    """The flow claim is one statement with no session state: two workers behind PgBouncer in
    transaction mode keep one job of a key running at a time (docs/howto/flow-control.md)."""
    from testproject.handlers import flow

    for step in range(4):
        for order in range(2):
            flow.sync_order.using(concurrency_key=f"order:{order}").enqueue(order, step, 0.05)
    workers = [start_worker("--concurrency", "2", "--poll-interval", "0.2") for _ in range(2)]
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.output()
    marks = dict(Execution.objects.values_list("label", "at"))
    for order in range(2):
        runs = [(marks[f"start:{order}:{s}"], marks[f"end:{order}:{s}"]) for s in range(4)]
        pairs = zip(runs, runs[1:], strict=False)
        assert all(end <= next_start for (_, end), (next_start, _) in pairs)
