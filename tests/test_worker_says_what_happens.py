"""What a new user sees when something is off: a queue named on ``runjobs`` that nothing uses,
every finished job at ``-v 2`` (and none at the default level), and the app missing from
``INSTALLED_APPS`` named as the fix."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgjobs import job
from django_pgjobs.models import Job
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)

UNUSED = "no registered job uses queue(s) 'email' and no job has been in them"


def test_a_queue_named_on_runjobs_that_nothing_uses_is_warned_about(start_worker):
    demo.record.using(queue="emails").enqueue("waiting in emails")

    typo = start_worker("--queue", "email", "--burst")
    assert typo.wait(60) == 0, typo.output()
    assert UNUSED in typo.output()
    assert "queues in use: " in typo.output() and "emails" in typo.output()
    assert Job.objects.count() == 1  # not its queue: left alone

    right = start_worker("--queue", "emails", "--burst")
    assert right.wait(60) == 0, right.output()
    assert "no registered job uses" not in right.output()
    assert not Job.objects.exists()


def test_every_finished_job_is_logged_at_verbosity_2_and_none_by_default(start_worker):
    demo.record.enqueue("quiet")
    quiet = start_worker("--burst")
    assert quiet.wait(60) == 0, quiet.output()
    assert "succeeded in" not in quiet.output() and " started: " in quiet.output()

    ok = demo.record.enqueue("logged")
    failing = demo.always_fails.using(max_attempts=1).enqueue()
    verbose = start_worker("--burst", "-v", "2")
    assert verbose.wait(60) == 0, verbose.output()
    assert f"job {demo.record.name} #{ok.id} succeeded in " in verbose.output()
    assert " ms (attempt 1/5)" in verbose.output()
    assert f"job {demo.always_fails.name} #{failing.id} failed (ValueError) in " in (
        verbose.output()
    )


APPS_WITHOUT_PGJOBS = ["django.contrib.contenttypes", "django.contrib.auth", "testproject.demo"]
FIX = 'django_pgjobs is not in INSTALLED_APPS: add "django_pgjobs" to INSTALLED_APPS and run'


def test_a_job_declared_or_enqueued_without_the_app_installed_names_the_fix():
    def report(label: str) -> None:
        pass

    assert demo.record.enqueue("with the app installed, first").id  # found once: kept
    with override_settings(INSTALLED_APPS=APPS_WITHOUT_PGJOBS):
        with pytest.raises(ImproperlyConfigured, match=FIX + ".*needed by @job reports.report"):
            job(name="reports.report")(report)
        with pytest.raises(ImproperlyConfigured, match=FIX + f".*enqueueing {demo.record.name}"):
            demo.record.enqueue("never")
        with pytest.raises(ImproperlyConfigured, match=FIX):
            demo.record.using(priority=5).enqueue_many([("never",)])
    assert Job.objects.count() == 1
    assert demo.record.enqueue("with the app installed").id  # back to normal
