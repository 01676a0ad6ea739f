"""Retry control by exception (docs/howto/handlers.md, "Retries by exception"), run by real
``runjobs`` processes: ``Retry(after=...)``, ``Discard``, ``retry_on`` and ``discard_on``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from helpers import wait_until

from django_pgjobs import Discard, Retry, get_result, job
from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter
from testproject.handlers.retries import (
    close_account,
    sync_account,
    sync_unless_rejected,
    sync_when_up,
)

pytestmark = pytest.mark.django_db(transaction=True)


def accounts(*names: str) -> None:
    for name in names:
        Counter.objects.create(name=name)


def calls(name: str) -> int:
    return Counter.objects.get(name=name).value


def burst(start_worker) -> None:
    worker = start_worker("--queue", "handlers", "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()


def test_retry_after_runs_the_job_again_after_that_delay_and_spends_an_attempt(start_worker):
    accounts("limited-1")
    queued = sync_account.using(keep_result=True).enqueue("limited-1")  # kept: history readable
    burst(start_worker)  # the first call is rate limited; the job waits its Retry-After
    row = Job.objects.get(id=queued.id)
    assert (row.status, row.attempts, calls("limited-1")) == ("ready", 1, 1)
    (entry,) = row.errors
    assert entry["type"] == "django_pgjobs.Retry"
    assert entry["message"] == "429 Too Many Requests (Retry-After: 3)"
    wait = row.run_after - datetime.fromisoformat(entry["at"])
    # Retry-After, not the backoff (1-2 s for a first failure)
    assert timedelta(seconds=2.9) <= wait <= timedelta(seconds=5)
    start_worker("--queue", "handlers")
    wait_until(lambda: get_result(queued.id).status == "successful", timeout=60)
    result = get_result(queued.id)
    assert (result.attempts, len(result.errors), calls("limited-1")) == (2, 1, 2)
    assert len(result.worker_ids) == 2
    assert result.started_at - datetime.fromisoformat(entry["at"]) >= timedelta(seconds=2.9)


def test_retry_on_the_last_attempt_dead_letters_saying_so(start_worker):
    accounts("limited-9")
    queued = sync_account.enqueue("limited-9")  # max_attempts=3, always rate limited
    start_worker("--queue", "handlers")
    wait_until(lambda: DeadLetter.objects.filter(job_id=queued.id).exists(), timeout=60)
    dead = DeadLetter.objects.get(job_id=queued.id)
    assert dead.reason.startswith("retry requested on the last attempt (3/3): django_pgjobs.Retry")
    assert [e["type"] for e in dead.errors] == ["django_pgjobs.Retry"] * 3
    assert calls("limited-9") == 3
    assert get_result(queued.id).status == "failed"


def test_discard_dead_letters_at_once_with_its_message(start_worker):
    accounts("kept")
    ghost = close_account.enqueue("ghost")
    kept = close_account.enqueue("kept")
    burst(start_worker)
    dead = DeadLetter.objects.get(job_id=ghost.id)
    assert dead.attempts == 1 and dead.max_attempts == 5
    assert dead.reason == (
        "discarded by the job: django_pgjobs.Discard: no account 'ghost': nothing to close"
    )
    assert dead.error_type == "django_pgjobs.Discard"
    assert "raise Discard(" in dead.errors[0]["traceback"]
    assert not Job.objects.filter(id__in=[ghost.id, kept.id]).exists()
    assert not Counter.objects.filter(name="kept").exists()


def test_retry_on_retries_only_its_exceptions(start_worker):
    accounts("down", "odd")
    down = sync_when_up.enqueue("down")
    odd = sync_when_up.enqueue("odd")
    burst(start_worker)
    retried = Job.objects.get(id=down.id)  # Unavailable is in retry_on: backoff, attempts left
    assert (retried.status, retried.attempts) == ("ready", 1)
    assert retried.errors[0]["type"] == "testproject.handlers.partner.Unavailable"
    dead = DeadLetter.objects.get(job_id=odd.id)  # KeyError is not: dead-lettered at once
    assert (dead.attempts, calls("odd")) == (1, 1)
    assert dead.reason == (
        f"not retried (not in retry_on of {sync_when_up.name}): KeyError: 'points'"
    )


def test_discard_on_dead_letters_its_exceptions_and_retries_others(start_worker):
    accounts("rejected", "odd")
    rejected = sync_unless_rejected.enqueue("rejected")
    odd = sync_unless_rejected.enqueue("odd")
    burst(start_worker)
    dead = DeadLetter.objects.get(job_id=rejected.id)
    assert (dead.attempts, calls("rejected")) == (1, 1)
    assert dead.reason == (
        f"discard_on of {sync_unless_rejected.name} holds this exception: "
        "testproject.handlers.partner.Rejected: 400 Bad Request: unknown account"
    )
    retried = Job.objects.get(id=odd.id)
    assert (retried.status, retried.attempts) == ("ready", 1)


def test_exception_classes_are_checked_at_job():
    def handler() -> None: ...

    for option, value in (
        ("retry_on", ("ValueError",)),
        ("retry_on", ValueError("x")),
        ("discard_on", (ValueError, int)),
        ("discard_on", [object]),
        ("retry_on", 42),
    ):
        with pytest.raises(ValueError, match=f"{option} must"):
            job(name=f"tests.bad_{option}", **{option: value})(handler)
    single = job(name="tests.single_class", retry_on=KeyError, discard_on=[OSError])(handler)
    assert single.retry_on == (KeyError,) and single.discard_on == (OSError,)


def test_retry_checks_its_delay():
    assert Retry(after=timedelta(minutes=2)).after == 120.0
    assert Retry().after is None and str(Retry()) == "retry requested"
    assert str(Retry(after=5)) == "retry requested in 5s"
    assert str(Retry(after=5, reason="busy")) == "busy"
    for bad in (-1, float("nan"), float("inf"), 10**12):
        with pytest.raises(ValueError, match="Retry"):
            Retry(after=bad)
    for bad in ("5", True):
        with pytest.raises(TypeError, match="Retry"):
            Retry(after=bad)
    assert issubclass(Discard, Exception) and Discard("x").args == ("x",)
