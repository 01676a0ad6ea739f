"""Payload versions (``@job(version=2, upgrade={1: upgrade_v1})``, docs/howto/repair.md): rows
carry the version they were enqueued with and are upgraded before the call; a row with no
upgrade path is dead-lettered with the reason, never called with the wrong arguments."""

from __future__ import annotations

import signal
import uuid

import pytest
from helpers import wait_until

from django_pgjobs import job, registry
from django_pgjobs.checks import check_job_versions
from django_pgjobs.claims import ClaimedJob
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.testing import run_jobs
from django_pgjobs.worker.admission import Refusal, admit
from testproject.demo.models import Counter
from testproject.handlers.versions import award_points

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry.registered())  # forget them afterwards


def test_a_job_whose_signature_changed_between_enqueue_and_run_is_upgraded_and_run(
    start_worker,
):
    Counter.objects.create(name="score")
    # written by the release before, when the job was award_points(counter, points)
    old = Job.objects.create(name=award_points.name, queue="handlers", args=["score", 5])
    assert old.version == 1  # the column's default: rows of releases before versions
    new = award_points.enqueue("score", amount=2)
    assert Job.objects.get(pk=new.pk).version == 2
    worker = start_worker("--queue", "handlers")
    wait_until(lambda: Counter.objects.get(name="score").value == 7, timeout=60)
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert not DeadLetter.objects.exists()


def test_a_row_of_a_version_this_release_does_not_know_is_dead_lettered_uncalled(start_worker):
    Counter.objects.create(name="score")
    newer = Job.objects.create(
        name=award_points.name, queue="handlers", args=["score"], kwargs={"points": 1}, version=3
    )
    worker = start_worker("--queue", "handlers")  # UNKNOWN_JOB_GRACE_SECONDS is 0 in tests
    wait_until(lambda: DeadLetter.objects.filter(job_id=newer.pk).exists(), timeout=60)
    dead = DeadLetter.objects.get(job_id=newer.pk)
    assert dead.error_type == "UnknownVersion" and dead.version == 3
    assert "of version 3, this worker knows versions up to 2" in dead.reason
    assert Counter.objects.get(name="score").value == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()


def claimed(name: str, args: list, kwargs: dict, version: int) -> ClaimedJob:
    return ClaimedJob(
        id=1, name=name, queue="q", priority=0, args=args, kwargs=kwargs, attempts=1,
        max_attempts=3, run_after=None, created_at=None, claim_token=uuid.uuid4(),
        version=version,
    )  # fmt: skip


def test_a_version_with_no_upgrade_step_is_refused_never_called(own_registry):
    called = []

    @job(name="versions.third", version=3, upgrade={2: lambda a, k: (a, {"x": k["y"]})})
    def third(*, x: int) -> None:
        called.append(x)

    refusal = admit(claimed("versions.third", [5], {}, version=1))
    assert isinstance(refusal, Refusal) and refusal.error_type == "NoUpgradePath"
    assert "no upgrade path from version 1 to 3" in refusal.reason
    assert "no step from version 1" in refusal.reason
    assert admit(claimed("versions.third", [], {"y": 4}, version=2)) is third
    assert called == []


def test_an_upgrade_that_raises_or_returns_nonsense_is_refused(own_registry):
    @job(name="versions.raises", version=2, upgrade={1: lambda a, k: (a[5], k)})
    def raises(a: int) -> None: ...

    @job(name="versions.nonsense", version=2, upgrade={1: lambda a, k: "nope"})
    def nonsense(a: int) -> None: ...

    refusal = admit(claimed("versions.raises", [1], {}, version=1))
    assert refusal.error_type == "UpgradeFailed" and "IndexError" in refusal.reason
    assert admit(claimed("versions.nonsense", [1], {}, version=1)).error_type == "UpgradeFailed"


def test_upgraded_arguments_that_do_not_fit_are_bad_arguments(own_registry):
    @job(name="versions.misfit", version=2, upgrade={1: lambda a, k: (a, {"wrong": 1})})
    def misfit(a: int) -> None: ...

    assert admit(claimed("versions.misfit", [1], {}, version=1)).error_type == "BadArguments"


def test_the_dead_letters_of_a_job_run_inline_keep_their_version(own_registry):
    @job(name="versions.gap", queue="gap", version=2)
    def gap(a: int) -> None: ...

    Job.objects.create(name="versions.gap", queue="gap", args=[1], version=1)
    run_jobs(["gap"])
    dead = DeadLetter.objects.get()
    assert (dead.error_type, dead.version) == ("NoUpgradePath", 1)


def test_skipped_versions_are_check_w002(own_registry):
    assert check_job_versions() == []  # the test project's jobs have every step

    @job(name="versions.skips", version=4, upgrade={2: lambda a, k: (a, k)})
    def skips() -> None: ...

    (warning,) = check_job_versions()
    assert warning.id == "pgjobs.W005"
    assert "'versions.skips' is version 4 but upgrade has no step from versions 1, 3" in warning.msg


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"version": 0}, "version must be an int from 1"),
        ({"version": "2"}, "version must be an int from 1"),
        ({"version": 2, "upgrade": {2: lambda a, k: (a, k)}}, "upgrade keys are the versions"),
        ({"version": 2, "upgrade": {1: "not callable"}}, "must be a function"),
    ],
)
def test_bad_version_options_are_refused_at_decoration(own_registry, options, message):
    with pytest.raises(ValueError, match=message):

        @job(name="versions.bad", **options)
        def bad(*args, **kwargs) -> None: ...
