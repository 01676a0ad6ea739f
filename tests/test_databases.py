"""Queues on two databases (``PGJOBS["QUEUE_DATABASES"]``, docs/howto/databases.md): the queue
"heavy" lives on "jobs2", a second real PostgreSQL database; every other queue on "default".

Enqueue writes a job on its queue's database (and commits with that database's transaction,
no other), a worker serves the queues of one database, ``run_jobs()`` runs each database's."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from helpers import FAST_LEASES, registered_for_the_test, wait_until

from django_pgjobs import enqueue_many, registry
from django_pgjobs.checks import check_atomic_jobs_database, check_recurring_jobs_database
from django_pgjobs.models import Job, Schedule
from django_pgjobs.routing import CrossDatabaseEnqueue
from django_pgjobs.testing import enqueued, run_jobs
from django_pgjobs.worker.options import WorkerOptions
from testproject.demo import jobs as demo
from testproject.demo.models import Execution
from testproject.handlers.databases import build_report

BOTH = ["default", "jobs2"]


@pytest.fixture
def heavy_on_jobs2(settings) -> dict[str, str]:
    """The queue "heavy" routed to "jobs2", here and in the worker processes the test starts
    (the environment to give them)."""
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2"}}
    return {
        "PGJOBS_TEST_QUEUE_DATABASES": "heavy=jobs2",
        "PGJOBS_TEST_JOBS2_DATABASE": connections["jobs2"].settings_dict["NAME"],
    }


def rows(alias: str, queue: str | None = None) -> list[Job]:
    jobs = Job.objects.using(alias).order_by("id")
    return list(jobs.filter(queue=queue) if queue else jobs)


@pytest.mark.django_db(databases=BOTH)
def test_a_job_is_written_on_its_queues_database(heavy_on_jobs2):
    report = build_report.enqueue("2026-10")
    (batch_first, batch_second) = enqueue_many(build_report, [("2026-11",), ("2026-12",)])
    email = demo.record.enqueue("stays on default")

    assert report._state.db == batch_first._state.db == "jobs2"
    assert email._state.db == "default"
    assert [j.id for j in rows("jobs2")] == [report.id, batch_first.id, batch_second.id]
    assert [j.id for j in rows("default")] == [email.id]
    assert [j.args for j in enqueued(queue="heavy")] == [["2026-10"], ["2026-11"], ["2026-12"]]


@pytest.mark.django_db(databases=BOTH)
def test_migrate_honours_the_router(heavy_on_jobs2):
    """``migrate --database jobs2`` (the test database's creation) made the jobs tables there
    and nothing else: testproject/routers.py."""
    tables = connections["jobs2"].introspection.table_names()
    assert "pgjobs_job" in tables and "pgjobs_deadletter" in tables
    assert "auth_user" not in tables and "demo_execution" not in tables
    call_command("migrate", database="jobs2", verbosity=0)  # nothing left to do: no error


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_rollback_on_the_second_database_takes_the_job_back(heavy_on_jobs2, other_connection):
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs2"):
        build_report.enqueue("rolled back")
        assert len(rows("jobs2")) == 1  # visible inside the transaction...
        raise RuntimeError("the caller changes its mind")
    assert rows("jobs2") == []  # ...and gone with it
    with transaction.atomic(using="jobs2"):
        kept = build_report.enqueue("committed")
    assert [j.id for j in rows("jobs2")] == [kept.id]


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_enqueue_inside_another_databases_transaction_is_refused(heavy_on_jobs2):
    with transaction.atomic():  # on "default"; "jobs2" has no transaction open
        with pytest.raises(CrossDatabaseEnqueue, match="transaction.atomic\\(using='jobs2'\\)"):
            build_report.enqueue("would commit at once")
        with pytest.raises(CrossDatabaseEnqueue):
            enqueue_many(build_report, [("neither",)])
        demo.record.enqueue("same database")  # a queue of "default": as always
        Execution.objects.create(job_id=0, attempt=0, label="still usable", pid=0)
        with transaction.atomic(using="jobs2"):  # a transaction of its own database: allowed
            build_report.enqueue("with jobs2's transaction")
    assert [j.args for j in rows("jobs2")] == [["with jobs2's transaction"]]
    assert [j.args for j in rows("default")] == [["same database"]]


def test_a_worker_serves_the_queues_of_one_database(heavy_on_jobs2):
    assert WorkerOptions.build(queues=["heavy"]).alias == "jobs2"
    assert WorkerOptions.build(queues=["emails"]).alias == "default"
    assert WorkerOptions.build(database="jobs2").alias == "jobs2"
    assert WorkerOptions.build().alias == "default"
    # the schedules and the outbox live on PGJOBS["DATABASE"]: a jobs2 worker leaves them
    assert not WorkerOptions.build(database="jobs2").schedules
    with pytest.raises(ValueError, match="Run one runjobs per database"):
        WorkerOptions.build(queues=["heavy", "emails"])
    with pytest.raises(ValueError, match="emails live on another database than 'jobs2'"):
        WorkerOptions.build(queues=["emails"], database="jobs2")
    with pytest.raises(ValueError, match="'elsewhere' holds no queue"):
        WorkerOptions.build(database="elsewhere")
    with pytest.raises(CommandError, match="default: emails; jobs2: heavy"):
        call_command("runjobs", "--queue", "heavy", "--queue", "emails", "--burst")


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_runjobs_per_database_drains_its_own_queues(heavy_on_jobs2, start_worker):
    enqueue_many(build_report, [(f"month {i}",) for i in range(20)])
    enqueue_many(demo.record, [(f"record {i}",) for i in range(20)])
    jobs2 = start_worker("--burst", "--queue", "heavy", env=heavy_on_jobs2)
    default = start_worker("--burst", "--database", "default", env=heavy_on_jobs2)
    assert jobs2.wait() == 0, jobs2.output()
    assert default.wait() == 0, default.output()

    assert rows("jobs2") == [] and rows("default") == []  # done, and deleted
    ran = {e.label: e.pid for e in Execution.objects.all()}
    assert {ran[f"report:month {i}"] for i in range(20)} == {jobs2.pid}
    assert {ran[f"record {i}"] for i in range(20)} == {default.pid}
    assert "database=jobs2" in jobs2.output() and "database=default" in default.output()


@pytest.mark.django_db(databases=BOTH)
def test_run_jobs_runs_the_jobs_of_both_databases(heavy_on_jobs2):
    build_report.enqueue("in the test")
    demo.record.enqueue("beside it")
    assert run_jobs(["heavy"]).succeeded == 1
    assert rows("jobs2") == [] and len(rows("default")) == 1
    build_report.enqueue("again")
    assert run_jobs().succeeded == 2
    labels = set(Execution.objects.values_list("label", flat=True))
    assert labels == {"report:in the test", "beside it", "report:again"}


@pytest.mark.django_db(databases=BOTH)
def test_run_jobs_uses_both_databases_after_a_test_that_used_one(heavy_on_jobs2):
    """A test that did not list "jobs2" ran before (Django's TestCase wrapped the connection's
    methods, then put them back as attributes of the connection): "jobs2" is usable again."""

    class DefaultOnly(TestCase):
        databases = {"default"}

    DefaultOnly._add_databases_failures()
    DefaultOnly._remove_databases_failures()
    build_report.enqueue("after a default-only test")
    demo.record.enqueue("beside it")
    assert run_jobs().succeeded == 2


@pytest.mark.django_db(databases=["default"])
def test_run_jobs_leaves_a_database_the_test_does_not_use(heavy_on_jobs2):
    demo.record.enqueue("only default")
    assert run_jobs().succeeded == 1  # no query on "jobs2", which this test may not use


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_immediate_mode_runs_a_job_on_its_queues_database(settings):
    settings.PGJOBS = {
        **settings.PGJOBS,
        "QUEUE_DATABASES": {"heavy": "jobs2"},
        "IMMEDIATE": True,
        "IMMEDIATE_WITHOUT_DEBUG": True,
    }
    with transaction.atomic(using="jobs2"):
        build_report.enqueue("at the commit")
        assert not Execution.objects.exists()
    assert list(Execution.objects.values_list("label", flat=True)) == ["report:at the commit"]
    assert rows("jobs2") == []


@pytest.mark.django_db(databases=BOTH)
def test_a_task_result_id_names_its_database(settings):
    """django.tasks: each database numbers its jobs, so a result id of another database than
    PGJOBS["DATABASE"] says which (``17@jobs2``), and the backend reads it there."""
    tasks = pytest.importorskip("testproject.handlers.tasks")
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"tasks": "jobs2"}}
    result = tasks.greet.enqueue("Ada")
    (job,) = rows("jobs2")
    assert result.id == f"{job.id}@jobs2"
    assert run_jobs(["tasks"]).succeeded == 1
    assert tasks.greet.get_result(result.id).return_value == "Hello, Ada!"


def hourly_report() -> None:
    pass


@pytest.mark.django_db(databases=BOTH)
def test_schedules_fire_on_the_first_database_only(heavy_on_jobs2, admin_client):
    """A schedule fires its job in the statement that records the fire, on PGJOBS["DATABASE"]:
    a recurring job whose queue lives on jobs2 is refused by E007, and a schedule of it fires
    nothing, nor does "run now"."""
    routed = registry.JobDefinition(
        func=hourly_report, name="tests.hourly_report", queue="heavy", cron="@hourly"
    )
    with registered_for_the_test(routed):
        (error,) = check_recurring_jobs_database()
        assert error.id == "pgjobs.E007" and "'heavy' lives on the database 'jobs2'" in error.msg
        schedule = Schedule.objects.create(
            name="reports", job_name=routed.name, cron="@hourly", next_fire_at=timezone.now()
        )
        changelist = reverse("admin:django_pgjobs_schedule_changelist")
        admin_client.post(changelist, {"action": "run_now", "_selected_action": [schedule.pk]})
        assert run_jobs(with_schedules=True).claimed == 0
    assert rows("default") == [] and rows("jobs2") == []


def report_in_one_transaction() -> None:
    pass


def test_an_atomic_job_on_a_routed_queue_is_warned_about(heavy_on_jobs2):
    """Its transaction is on jobs2: what it writes to "default" is not rolled back with it."""
    atomic = registry.JobDefinition(
        func=report_in_one_transaction, name="tests.atomic_report", queue="heavy", atomic=True
    )
    with registered_for_the_test(atomic):
        (warning,) = check_atomic_jobs_database()
    assert warning.id == "pgjobs.W001" and "tests.atomic_report" in warning.msg
    assert check_atomic_jobs_database() == []


def listening_on(alias: str) -> bool:
    """A worker is in LISTEN on the database ``alias`` (its listener's last statement)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN pgjobs'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_worker_of_the_second_database_is_woken_by_its_enqueue(heavy_on_jobs2, start_worker):
    """The notification goes out on the job's database, where its workers listen: with a poll
    of a minute, only it can start the job within seconds."""
    start_worker("--queue", "heavy", "--poll-interval", "60", env=heavy_on_jobs2)
    wait_until(lambda: listening_on("jobs2"))
    build_report.enqueue("first")
    # acknowledged (deleted) by the statement that also claims, which finds nothing: the
    # worker now waits for a notification, or a minute
    wait_until(lambda: rows("jobs2") == [] and Execution.objects.exists())
    with transaction.atomic(using="jobs2"):
        build_report.enqueue("woken")
    wait_until(lambda: Execution.objects.filter(label="report:woken").exists(), timeout=5)


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_worker_of_the_second_database_rescues_a_job_lost_there(heavy_on_jobs2, start_worker):
    """Leases, heartbeats and the rescue run on the database the worker serves: a job of jobs2
    whose worker is killed is run again by another worker of jobs2."""
    env = {**heavy_on_jobs2, **FAST_LEASES}
    lost = start_worker("--queue", "heavy", env=env)
    job = demo.record.using(queue="heavy").enqueue("rescued", sleep=1.0)
    wait_until(lambda: Job.objects.using("jobs2").filter(pk=job.pk, status="running").exists())
    lost.kill_group()
    start_worker("--queue", "heavy", env=env)
    wait_until(lambda: Execution.objects.filter(label="rescued").exists(), timeout=20)
    (execution,) = Execution.objects.filter(label="rescued")
    assert execution.attempt == 2
