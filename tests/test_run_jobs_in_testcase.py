"""``run_jobs()`` inside Django's ``TestCase`` (and ``@pytest.mark.django_db`` without
``transaction=True``): the jobs the test enqueued run through the production claim and
completion on the test's own connection, inside its transaction, which takes everything back.
Before the inline worker, these jobs were invisible to the worker's threads: nothing ran."""

from __future__ import annotations

import time

import pytest
from django.db import connection, transaction
from django.test import TestCase
from helpers import registered_for_the_test

from django_pgjobs import RetryPolicy, get_result, job, registry, taskframework
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.testing import run_jobs
from testproject.demo import jobs as demo
from testproject.demo.models import Counter, Execution


def _fails() -> None:
    raise ValueError("no luck")


class RunJobsInATestCase(TestCase):
    def test_jobs_a_view_enqueued_run_and_their_writes_are_seen(self):
        kinds = ["plain", "atomic", "async"] + (["task"] if taskframework.AVAILABLE else [])
        for kind in kinds:
            with self.subTest(kind):
                response = self.client.post(f"/record/{kind}/", {"label": f"from-{kind}"})
                self.assertEqual(response.status_code, 202)
                self.assertEqual(run_jobs(["default", "tasks"]).succeeded, 1)
                self.assertTrue(Execution.objects.filter(label=f"from-{kind}").exists())
        # (a task's result is kept: its row stays, succeeded)
        self.assertFalse(Job.objects.filter(status__in=["ready", "running"]).exists())

    def test_a_plain_job_runs_once_as_its_first_attempt(self):
        job = demo.record.enqueue("plain")
        self.assertEqual(run_jobs().succeeded, 1)
        self.assertEqual(
            list(Execution.objects.values_list("label", "attempt", "job_id")),
            [("plain", 1, job.pk)],
        )
        self.assertEqual(run_jobs().claimed, 0)  # nothing left, nothing run twice

    def test_jobs_with_flow_control_all_run_in_the_tests_transaction(self):
        """Keys claimed earlier in the test's own transaction count as seen, and buckets refill
        between its statements (docs/explanation/flow-control.md)."""
        from testproject.handlers import flow

        for step in range(3):
            flow.sync_order.using(concurrency_key="order:1").enqueue(1, step)
        flow.call_partner.enqueue_many([(n,) for n in range(5)])  # 20/s, a burst of 2
        self.assertEqual(run_jobs().succeeded, 8)
        labels = Execution.objects.filter(label__startswith="start:").order_by("id")
        self.assertEqual([e.label for e in labels], ["start:1:0", "start:1:1", "start:1:2"])

    def test_a_keyed_job_a_plain_job_enqueued_runs_in_the_same_call(self):
        """run_jobs() has no notifications: a keyed job enqueued by a job it ran is found by
        the flow claim it makes before it ends (it ended after the plain claim's look, and the
        keyed job waited for the next call)."""
        from testproject.handlers import flow

        flow.place_order.enqueue(7)
        self.assertEqual(run_jobs().succeeded, 2)
        labels = Execution.objects.order_by("id").values_list("label", flat=True)
        self.assertEqual(list(labels), ["placed:7", "start:7:0", "end:7:0"])

    def test_a_keyed_jobs_retry_waits_out_its_backoff_in_an_old_transaction(self):
        """The flow claim's clock is the statement's (buckets refill inside the test's
        transaction); the retry's time was the transaction's start plus the backoff. In a
        transaction older than the backoff a keyed job's retry was due at once, and one
        run_jobs() spent every attempt (a plain job's retry is never due there)."""
        declared = job(
            name="tests.keyed_retry",
            max_attempts=2,
            retry=RetryPolicy(base_seconds=1.5, jitter=0),  # beyond run_jobs' 1 s wait
        )(_fails)
        registry._REGISTRY.pop(declared.name, None)
        with registered_for_the_test(declared):
            time.sleep(1.6)  # the test's transaction is now older than the backoff
            declared.using(concurrency_key="report:1").enqueue()
            first = run_jobs()
            self.assertEqual((first.retried, first.dead_lettered), (1, 0))
            self.assertEqual(Job.objects.get().status, "ready")  # waiting out its backoff

    def test_an_async_job_writes_through_the_tests_connection(self):
        demo.record_async.enqueue("async")
        self.assertEqual(run_jobs().succeeded, 1)
        self.assertEqual(list(Execution.objects.values_list("label", flat=True)), ["async"])

    def test_a_kept_result_is_readable(self):
        job = demo.add_async.using(keep_result=True).enqueue(2, 3)
        run_jobs()
        result = get_result(job.pk)
        self.assertEqual((result.status, result.return_value), ("successful", {"sum": 5}))

    def test_retries_run_to_the_dead_letters_with_scheduled_jobs(self):
        demo.always_fails.enqueue("no luck")  # max_attempts=3
        first = run_jobs()
        self.assertEqual((first.retried, first.dead_lettered), (1, 0))  # its retry waits
        rest = run_jobs(with_scheduled=True)
        self.assertEqual((rest.retried, rest.dead_lettered), (1, 1))
        dead = DeadLetter.objects.get()
        self.assertEqual((dead.attempts, len(dead.errors)), (3, 3))

    def test_a_job_that_aborts_the_transaction_fails_and_the_test_goes_on(self):
        demo.fail_in_the_database.enqueue("division")
        stats = run_jobs()
        self.assertEqual(stats.dead_lettered, 1)
        self.assertIn("division by zero", DeadLetter.objects.get().errors[-1]["message"])
        # its statements were rolled back to its savepoint; the test's connection works
        self.assertFalse(Execution.objects.exists())
        demo.record.enqueue("after")
        self.assertEqual(run_jobs().succeeded, 1)

    def test_an_async_jobs_timeout_is_enforced(self):
        demo.record_async.using(timeout=0.2, max_attempts=1).enqueue("slow", sleep=30)
        self.assertEqual(run_jobs().dead_lettered, 1)
        dead = DeadLetter.objects.get()
        self.assertEqual(dead.error_type, "django_pgjobs.JobTimeout")
        self.assertFalse(Execution.objects.exists())

    def test_a_jobs_on_commit_callbacks_run_when_its_savepoint_is_released(self):
        """As a worker process runs them: at once for a plain job in autocommit. Before, they
        waited for the test's commit, which never comes."""
        demo.record_on_commit.enqueue("committed")
        self.assertEqual(run_jobs().succeeded, 1)
        self.assertEqual(list(Execution.objects.values_list("label", flat=True)), ["committed"])

    def test_ctrl_c_in_a_job_stops_run_jobs_after_recording_the_failure(self):
        demo.press_ctrl_c.enqueue()  # max_attempts=3
        with self.assertRaises(KeyboardInterrupt):
            run_jobs(with_scheduled=True)
        job = Job.objects.get()  # the failure recorded, its retry waiting; run once only
        self.assertEqual((job.attempts, len(job.errors)), (1, 1))

    def test_with_scheduled_stops_after_max_rounds_naming_the_jobs(self):
        demo.reschedule_forever.enqueue("again")
        with self.assertRaisesMessage(RuntimeError, "testproject.demo.jobs.reschedule_forever"):
            run_jobs(with_scheduled=True, max_rounds=5)
        self.assertEqual(Execution.objects.count(), 5)

    def test_the_previous_tests_jobs_were_rolled_back(self):
        self.assertFalse(Job.objects.exists() or Execution.objects.exists())


@pytest.mark.skipif(not taskframework.AVAILABLE, reason="no Tasks framework")
class RunTasksInATestCase(TestCase):
    def test_a_django_task_runs_and_its_result_is_kept(self):
        from testproject.handlers import tasks

        Counter.objects.create(name="points", value=1)
        result = tasks.add_points.enqueue("points", 5)
        self.assertEqual(run_jobs(["tasks"]).succeeded, 1)
        self.assertEqual(Counter.objects.get(name="points").value, 6)
        result.refresh()
        self.assertEqual(result.return_value, 6)


@pytest.mark.django_db
def test_run_jobs_in_a_pytest_test_without_transaction_true():
    """pytest-django's default database access: the test's transaction, as in ``TestCase``."""
    assert connection.in_atomic_block
    with transaction.atomic():
        demo.record_atomic.enqueue("pytest")
    assert run_jobs().succeeded == 1
    assert Counter.objects.get(name="pytest").value == 1
