"""The worker's vacuum of the jobs table (django_pgjobs/worker/vacuum.py): run alone against the
test database, then inside ``runjobs`` processes."""

from __future__ import annotations

import logging

import psycopg
import pytest
from django.db import connection
from helpers import database_url_for_tests, wait_until

from django_pgjobs import enqueue_many
from django_pgjobs.models import Job
from django_pgjobs.worker.faults import DispatcherDatabase
from django_pgjobs.worker.stopping import StopState
from django_pgjobs.worker.vacuum import TableVacuum, VacuumConfig
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def unit(**config) -> TableVacuum:
    return TableVacuum(DispatcherDatabase("default", StopState(grace=0)), VacuumConfig(**config))


def table_stats() -> tuple[int, int]:
    """The jobs table's dead row versions and manual vacuums, as the server's statistics say
    (this connection's own counts flushed first)."""
    with connection.cursor() as cursor:
        if connection.pg_version >= 150000:  # before 15 the statistics collector sends them
            cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname = 'pgjobs_job'"
        )
        return cursor.fetchone()


@pytest.fixture
def no_autovacuum():
    """Autovacuum kept off the jobs table for the test: the server's autovacuum could remove the
    dead rows a test made before the vacuum under test looks at them (it did once in CI: the
    unit found the table clean)."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgjobs_job SET (autovacuum_enabled = false)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgjobs_job RESET (autovacuum_enabled)")


def make_dead_rows(count: int) -> None:
    """``count`` jobs enqueued and deleted: ``count`` dead row versions."""
    enqueue_many(demo.noop, [((), {})] * count)
    Job.objects.all().delete()
    wait_until(lambda: table_stats()[0] >= count, timeout=20)


@pytest.mark.usefixtures("no_autovacuum")
def test_it_vacuums_past_the_threshold_on_its_own_thread_and_not_below():
    vacuum = unit(min_dead=500)
    make_dead_rows(300)
    assert vacuum.run_once() == "clean"
    make_dead_rows(300)
    dead, vacuums = table_stats()
    assert vacuum.run_once() == "started"
    assert vacuum.thread is not None and vacuum.thread.name == "pgjobs-vacuum"
    vacuum.close()
    assert vacuum.last is not None
    assert vacuum.last.dead_before >= 600 and vacuum.last.dead_after < 100
    assert vacuum.backoff == 1
    wait_until(lambda: table_stats()[1] == vacuums + 1, timeout=20)
    assert table_stats()[0] < 100


@pytest.mark.usefixtures("no_autovacuum")
def test_a_vacuum_that_cannot_remove_the_rows_waits_longer_before_the_next():
    """A transaction that began before the rows died (a long report, a forgotten ``BEGIN``)
    keeps them: the vacuum removes nothing, and the interval doubles, up to its cap."""
    with psycopg.connect(database_url_for_tests(), autocommit=False) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgjobs_job").fetchone()  # its snapshot: the xmin
        vacuum = unit(interval_seconds=10, min_dead=200, max_backoff=4)
        make_dead_rows(400)
        for backoff in (2, 4, 4):
            assert vacuum.run_once() == "started"
            vacuum.close()
            assert vacuum.last is not None and vacuum.last.dead_after >= 400
            assert vacuum.backoff == backoff
            assert vacuum.interval() == 10 * backoff
    assert vacuum.run_once() == "started"  # the transaction ended: the rows go
    vacuum.close()
    assert vacuum.last is not None and vacuum.last.dead_after < 100
    assert vacuum.backoff == 1


def test_a_database_user_that_may_not_vacuum_turns_it_off_said_once(caplog):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        )
        if not cursor.fetchone()[0]:
            pytest.skip("the test database's user cannot create a role")
        cursor.execute("DROP ROLE IF EXISTS pgjobs_vacuum_test")
        cursor.execute("CREATE ROLE pgjobs_vacuum_test")
        cursor.execute("GRANT SELECT ON pgjobs_job TO pgjobs_vacuum_test")
    try:
        make_dead_rows(300)
        with connection.cursor() as cursor:
            cursor.execute("SET ROLE pgjobs_vacuum_test")
        vacuum = unit(min_dead=100)
        with caplog.at_level(logging.INFO, logger="django_pgjobs.worker"):
            assert vacuum.run_once() == "off"
            assert vacuum.run_once() == "off"
        assert vacuum.thread is None
        said = [r.getMessage() for r in caplog.records if "may not" in r.getMessage()]
        assert len(said) == 1 and "autovacuum still does" in said[0]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute("REVOKE ALL ON pgjobs_job FROM pgjobs_vacuum_test")
            cursor.execute("DROP ROLE pgjobs_vacuum_test")


def test_runjobs_vacuums_the_table_it_drains(start_worker):
    """Two ``runjobs`` processes with a short interval drain 12,000 jobs (24,000 dead row
    versions, past the 10,000 threshold): the table is vacuumed by them, not by autovacuum's
    minute, every job ran, and nothing went wrong."""
    vacuums = table_stats()[1]
    env = {"PGJOBS_VACUUM_INTERVAL_SECONDS": "0.5"}
    workers = [start_worker("--concurrency", "4", env=env) for _ in range(2)]
    for _ in range(6):
        enqueue_many(demo.noop, [((), {})] * 2000)
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    wait_until(lambda: table_stats()[1] > vacuums, timeout=40, interval=0.5)
    # the first vacuum may have run mid-drain, and its dead rows left the next one waiting
    # longer (the back-off): the last rows go at a later look, well within autovacuum's minute
    wait_until(lambda: table_stats()[0] < 10_000, timeout=40, interval=0.5)
    for worker in workers:
        assert "could not vacuum" not in worker.output()
        assert "Traceback" not in worker.output()


@pytest.mark.usefixtures("no_autovacuum")
def test_its_vacuum_leaves_the_empty_table_its_pages():
    """A vacuum that truncates the table's empty tail locks the whole table (ACCESS EXCLUSIVE):
    the claims and enqueues of a busy queue stop while it does. The jobs table says no
    (``vacuum_truncate = false``, migration 0026): an emptied table keeps its pages, for the
    worker's vacuum and autovacuum alike."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'pgjobs_job'::regclass")
        assert "vacuum_truncate=false" in cursor.fetchone()[0]
    make_dead_rows(3000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('pgjobs_job')")
        size = cursor.fetchone()[0]
    assert size > 10 * 8192
    vacuum = unit(min_dead=1000)
    assert vacuum.run_once() == "started"
    vacuum.close()
    assert vacuum.last is not None and vacuum.last.dead_after < 100  # it did vacuum them
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('pgjobs_job')")
        assert cursor.fetchone()[0] == size
        # the same vacuum, told to truncate, gives the pages back: what the setting prevents
        cursor.execute("VACUUM (TRUNCATE true) pgjobs_job")
        cursor.execute("SELECT pg_relation_size('pgjobs_job')")
        assert cursor.fetchone()[0] < size
