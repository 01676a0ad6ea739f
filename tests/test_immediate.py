"""Immediate mode (``PGJOBS["IMMEDIATE"]``): a job enqueued in a transaction runs in this process
when it commits, through the worker's claim and completion; a rollback runs nothing; in
autocommit it runs at once; only the jobs the caller enqueued are claimed."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import transaction
from django.test import TestCase, override_settings
from helpers import enqueue_around_rollbacks

from django_pgjobs import signals
from django_pgjobs.checks import check_immediate_mode
from django_pgjobs.models import DeadLetter, Job
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

IMMEDIATE = {**settings.PGJOBS, "IMMEDIATE": True}
NOT_IMMEDIATE = {**settings.PGJOBS, "IMMEDIATE": False}


def labels() -> list[str]:
    return sorted(Execution.objects.values_list("label", flat=True))


@pytest.fixture
def immediate():
    with override_settings(PGJOBS=IMMEDIATE):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_in_a_transaction_runs_when_it_commits(immediate):
    with transaction.atomic():
        job = demo.record.enqueue("committed")
        assert labels() == []  # not before the commit
    # claimed, run as its first attempt, completed (deleted: KEEP_SUCCEEDED_SECONDS is 0)
    execution = Execution.objects.get()
    assert (execution.label, execution.job_id, execution.attempt) == ("committed", job.pk, 1)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_runs_nothing(immediate):
    enqueue_around_rollbacks(demo.record.enqueue)  # only "kept" commits
    assert labels() == ["kept"]
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_in_autocommit_a_job_runs_at_once_and_a_bulk_enqueue_too(immediate):
    demo.record.enqueue("autocommit")
    assert labels() == ["autocommit"]
    demo.record.enqueue_many([("one",), ("two",)])
    assert labels() == ["autocommit", "one", "two"]


@pytest.mark.django_db(transaction=True)
def test_only_the_jobs_the_caller_enqueued_run(immediate):
    with override_settings(PGJOBS=NOT_IMMEDIATE):  # another process's job, ready
        other = demo.record.enqueue("another process's")
    later = demo.record.using(delay=3600).enqueue("due in an hour")
    demo.record.enqueue("mine")
    assert labels() == ["mine"]
    assert set(Job.objects.values_list("id", "status")) == {
        (other.pk, "ready"),
        (later.pk, "ready"),
    }


@pytest.mark.django_db(transaction=True)
def test_arguments_go_through_json_and_failures_through_the_retry_path(immediate):
    demo.record.enqueue(label="from kwargs")
    assert labels() == ["from kwargs"]
    # the caller is not raised at: the attempt fails as in a worker and is retried later
    demo.always_fails.using(max_attempts=2).enqueue("no luck")
    (job,) = Job.objects.all()
    assert (job.status, job.attempts, job.errors[-1]["message"]) == ("ready", 1, "no luck")
    demo.always_fails.using(max_attempts=1).enqueue("dead")
    assert DeadLetter.objects.get().errors[-1]["message"] == "dead"


@pytest.mark.django_db(transaction=True)
def test_a_view_that_enqueues_has_run_the_job_when_it_returns(client, immediate):
    for kind in ("plain", "atomic", "async"):
        assert client.post(f"/record/{kind}/", {"label": kind}).status_code == 202
    assert labels() == ["async", "atomic", "plain"]


@override_settings(PGJOBS=IMMEDIATE)
class ImmediateInATestCase(TestCase):
    def test_the_job_runs_on_the_tests_connection_when_its_commit_callbacks_run(self):
        with self.captureOnCommitCallbacks(execute=True):
            demo.record.enqueue("in a TestCase")
            self.assertEqual(labels(), [])
        self.assertEqual(labels(), ["in a TestCase"])
        self.assertFalse(Job.objects.exists())


def test_the_system_check_refuses_immediate_mode_without_debug():
    def errors(debug: bool, **pgjobs) -> list[str]:
        with override_settings(DEBUG=debug, PGJOBS={**settings.PGJOBS, **pgjobs}):
            return [error.id for error in check_immediate_mode()]

    assert errors(False, IMMEDIATE=True) == ["pgjobs.E006"]
    assert errors(True, IMMEDIATE=True) == []
    assert errors(False, IMMEDIATE=True, IMMEDIATE_WITHOUT_DEBUG=True) == []
    assert errors(False) == []


@pytest.mark.django_db(transaction=True)
def test_off_nothing_runs_and_nothing_listens_to_each_enqueue():
    """Off (the default): a job waits for a worker, and no receiver makes a bulk enqueue send
    the job_enqueued signal once per job."""
    with override_settings(PGJOBS=NOT_IMMEDIATE):
        demo.record.enqueue("waits")
        assert labels() == [] and Job.objects.get().status == "ready"
        assert not signals.job_enqueued.has_listeners(Job)
    with override_settings(PGJOBS=IMMEDIATE):
        assert signals.job_enqueued.has_listeners(Job)
