"""Rolling deploys: a job whose name a worker does not know (the web processes already run the
next release) is handed back, attempt not spent, for a worker that knows it, for
``UNKNOWN_JOB_GRACE_SECONDS`` after its enqueue; only then is it dead-lettered
(django_pgjobs/worker/failures.py, docs/howto/deploy.md)."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.test import override_settings
from django.utils import timezone
from helpers import run_worker, wait_until

from django_pgjobs.conf import DEFAULTS
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.worker.failures import UNKNOWN_RECHECK_SECONDS
from testproject.demo import next_release
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

NEXT = "testproject.demo.next_release"


def grace(seconds: float):
    from django.conf import settings

    return override_settings(PGJOBS={**settings.PGJOBS, "UNKNOWN_JOB_GRACE_SECONDS": seconds})


def test_the_default_grace_covers_a_rolling_deploy():
    assert DEFAULTS.UNKNOWN_JOB_GRACE_SECONDS == 600


def test_a_job_unknown_to_an_old_worker_waits_for_a_worker_that_knows_it(start_worker):
    env = {"PGJOBS_UNKNOWN_JOB_GRACE_SECONDS": "120"}
    old = start_worker("--poll-interval", "0.2", env={**env, "PGJOBS_TEST_RELEASE": "v1"})
    wait_until(lambda: " started: " in old.output())
    queued = next_release.record_next.enqueue("from v2")  # the web processes run v2 already

    wait_until(lambda: "does not know" in old.output(), timeout=30)
    assert "release v1" in old.output() and f"{NEXT}.record_next (1)" in old.output()
    row = Job.objects.get(pk=queued.id)
    assert (row.status, row.attempts, row.started_at, row.first_started_at) == (
        "ready",
        0,
        None,
        None,
    )
    assert row.run_after > timezone.now() + dt.timedelta(seconds=UNKNOWN_RECHECK_SECONDS - 2)
    assert not DeadLetter.objects.exists()

    new = start_worker(
        "--poll-interval",
        "0.2",
        env={**env, "PGJOBS_TEST_JOB_MODULES": NEXT, "PGJOBS_TEST_RELEASE": "v2"},
    )
    wait_until(lambda: not Job.objects.filter(pk=queued.id).exists(), timeout=60)

    # it ran once, as its first attempt: the old worker's claims spent none
    runs = list(Execution.objects.values_list("job_id", "attempt", "label"))
    assert runs == [(queued.id, 1, "from v2")], old.output() + new.output()
    assert not DeadLetter.objects.exists()
    # the old worker handed it back once, then left the name to the workers that know it
    assert old.output().count("does not know") == 1, old.output()
    for worker in (old, new):
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.output()


def test_an_unknown_job_is_dead_lettered_once_the_grace_has_passed():
    recent = Job.objects.create(name="nobody.knows_this", args=[])
    old = Job.objects.create(name="nobody.knows_this_either", args=[])
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(seconds=61))

    with grace(60):
        worker = run_worker()

    assert worker.stats.released == 1 and worker.stats.dead_lettered == 1
    waiting = Job.objects.get(pk=recent.pk)
    assert (waiting.status, waiting.attempts) == ("ready", 0)
    dead = DeadLetter.objects.get()
    assert dead.name == "nobody.knows_this_either" and dead.error_type == "UnknownJob"
    assert "still unknown 60s after its enqueue (UNKNOWN_JOB_GRACE_SECONDS)" in dead.reason
    assert dead.attempts == 1  # the attempt the dead-lettering claim numbered


def test_without_a_grace_an_unknown_job_is_dead_lettered_at_once():
    Job.objects.create(name="nobody.knows_this", args=[])
    with grace(0):
        run_worker()
    assert DeadLetter.objects.get().error_type == "UnknownJob"
    assert "UNKNOWN_JOB_GRACE_SECONDS" not in DeadLetter.objects.get().reason


def test_the_hand_back_of_an_unknown_job_is_fenced_by_its_claim_token():
    from django.db import connection

    from django_pgjobs import operations

    Job.objects.create(name="nobody.knows_this", args=[])
    claims = operations.ClaimBuilder(worker="old", queues=None, lease_seconds=60)
    (job,) = operations.complete(connection, claim=claims.take(1)).claimed
    Job.objects.filter(pk=job.id).update(claim_token=None, status="ready")  # rescued meanwhile
    Job.objects.filter(pk=job.id).update(status="running", attempts=2)  # and claimed again

    assert operations.defer_unknown_jobs(connection, [job], grace_seconds=60, delay=5) == set()
    row = Job.objects.get(pk=job.id)
    assert (row.status, row.attempts) == ("running", 2)  # the new holder's claim is untouched
