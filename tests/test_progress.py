"""Progress and metadata: ``current_job().set_progress(done, total, note=...)`` and
``set_metadata(...)`` written on the job's row (at most once a second for progress), read by
``get_result()`` and shown by the admin."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from django_pgjobs import get_result, job, progress
from django_pgjobs.context import current_job
from django_pgjobs.testing import run_jobs
from testproject.handlers import developing


class ProgressInATestCase(TestCase):
    def test_the_last_report_and_the_metadata_are_read_by_get_result(self):
        queued = developing.import_rows.enqueue(5)
        self.assertEqual(run_jobs(["handlers"]).succeeded, 1)
        result = developing.import_rows.get_result(queued.pk)
        self.assertEqual(result.return_value, 5)
        assert result.progress is not None
        self.assertEqual(
            {key: result.progress[key] for key in ("done", "total", "note")},
            {"done": 5, "total": 5, "note": "row 5 of 5"},
        )
        self.assertEqual(result.metadata, {"source": "upload.csv", "rows": 5})

    def test_the_admin_shows_a_jobs_progress(self):
        from django.contrib.auth.models import User

        queued = developing.import_rows.enqueue(3)
        run_jobs(["handlers"])
        self.client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
        page = self.client.get(f"/admin/django_pgjobs/job/{queued.pk}/change/")
        self.assertContains(page, "3 of 3 (100%)")
        self.assertContains(page, "row 3 of 3")
        self.assertContains(page, "upload.csv")


@job(queue="handlers")
def report_often(reports: int) -> float:
    """Reports its progress ``reports`` times as fast as it can; the seconds it took."""
    running = current_job()
    assert running is not None
    started = time.perf_counter()
    for done in range(reports):
        running.set_progress(done, reports * 2, note="going")
    return time.perf_counter() - started


@pytest.mark.django_db
def test_reports_are_throttled_to_one_write_a_second():
    """10,000 reports in a tight loop: an UPDATE for the first, then at most one a second (one
    in all when the loop takes under a second: about 100 ms here, 10 µs a report; a loaded
    machine with slow commits took over a second once)."""
    queued = report_often.using(keep_result=True).enqueue(10_000)
    with CaptureQueriesContext(connection) as queries:
        run_jobs(["handlers"])
    writes = [q for q in queries.captured_queries if "progress = COALESCE" in q["sql"]]
    seconds = get_result(queued.pk).return_value
    print(f"10,000 reports: {seconds * 1000:.1f} ms, {len(writes)} write(s)")
    assert progress.PROGRESS_WRITE_SECONDS == 1.0
    assert 1 <= len(writes) <= 1 + int(seconds), (len(writes), seconds)
