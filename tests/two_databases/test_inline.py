"""run_jobs() in a TestCase with the jobs on a second alias; run by
tests/test_run_jobs_two_databases.py with ``--ds two_databases.settings``."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connections
from django.test import TestCase

from django_pgjobs.models import DeadLetter
from django_pgjobs.testing import assert_enqueued, enqueued, run_jobs
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.skipif(
    settings.PGJOBS.get("DATABASE") != "jobs", reason="needs --ds two_databases.settings"
)


class TwoDatabases(TestCase):
    databases = {"default", "jobs"}

    def test_enqueued_reads_the_jobs_database(self):
        job = demo.record.enqueue("seen")
        self.assertEqual([j.pk for j in enqueued(demo.record)], [job.pk])
        assert_enqueued(demo.record, "seen")

    def test_a_job_writing_on_default_runs_in_the_tests_transaction(self):
        demo.record.enqueue("written")
        self.assertEqual(run_jobs().succeeded, 1)
        self.assertTrue(Execution.objects.filter(label="written").exists())

    def test_a_database_error_on_default_leaves_the_tests_transaction_usable(self):
        demo.fail_in_the_database.enqueue("division")  # records, then fails, on "default"
        self.assertEqual(run_jobs().dead_lettered, 1)
        self.assertTrue(connections["default"].in_atomic_block)
        self.assertFalse(Execution.objects.filter(label="division").exists())
        self.assertEqual(DeadLetter.objects.using("jobs").count(), 1)
