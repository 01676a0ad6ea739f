"""docs/howto/from-celery.md: the guide's jobs and calls (testproject/handlers/from_celery.py and
the ``enqueue_daily_digest`` command) run by real ``runjobs`` processes, and its testing
section, which is this file's first test."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from helpers import wait_until

from django_pgjobs import get_result
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.testing import assert_enqueued, enqueued, run_jobs
from testproject.demo.models import Counter, Signup
from testproject.handlers.from_celery import (
    build_report,
    cancel_welcome,
    count_signups,
    push_points,
    rebuild_search_index,
    send_daily_digest,
    send_welcome_email,
    sign_up,
    signups_counted,
    sync_account,
    sync_once,
    welcome_all,
    welcome_later,
)

pytestmark = pytest.mark.django_db(transaction=True)


# tests/test_from_celery.py
@pytest.mark.django_db(transaction=True)
def test_signup_sends_the_welcome_email(mailoutbox):
    signup = sign_up("ada@example.com")
    assert_enqueued(send_welcome_email, signup.pk)  # what CELERY_TASK_ALWAYS_EAGER hid
    stats = run_jobs(["emails"])  # the real claim, retries and dead letters, in this process
    assert stats.succeeded == 1
    assert mailoutbox[0].to == ["ada@example.com"]


def burst(start_worker, *queues: str) -> None:
    arguments = [part for queue in queues for part in ("--queue", queue)]
    worker = start_worker(*arguments, "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()


def test_delay_in_a_transaction_and_apply_async_later_run_in_a_worker(start_worker):
    ada = sign_up("ada@example.com")
    with pytest.raises(RuntimeError), transaction.atomic():
        sign_up("bob@example.com")  # its savepoint commits into this transaction ...
        raise RuntimeError("... which rolls back: no signup, no job")
    later = welcome_later(ada, timezone.now() + timedelta(hours=1))
    assert (later.queue, later.priority, later.args) == ("emails-bulk", -10, [ada.pk])
    assert len(enqueued(send_welcome_email)) == 2
    burst(start_worker, "emails", "emails-bulk")
    assert Signup.objects.get(pk=ada.pk).welcomed_at is not None
    assert not Signup.objects.filter(email="bob@example.com").exists()
    assert [job.id for job in enqueued(send_welcome_email)] == [later.id]  # not due yet
    assert cancel_welcome(later.id) is True and not Job.objects.exists()
    assert cancel_welcome(later.id) is False


def test_retries_as_autoretry_for_and_self_retry(start_worker):
    for account in ("down", "rejected", "limited-1"):
        Counter.objects.create(name=account)
    down = sync_account.enqueue("down")  # Unavailable: retried
    rejected = sync_account.enqueue("rejected")  # not in retry_on: dead-lettered at once
    limited = push_points.using(keep_result=True).delay("limited-1")
    start_worker("--queue", "partner")
    wait_until(lambda: get_result(limited.id).status == "successful", timeout=60)
    result = get_result(limited.id)
    (entry,) = result.errors
    assert entry["type"] == "django_pgjobs.Retry"
    assert entry["message"] == "attempt 1: 429 Too Many Requests (Retry-After: 3)"
    assert result.started_at - result.enqueued_at >= timedelta(seconds=3)
    wait_until(lambda: DeadLetter.objects.filter(job_id=rejected.id).exists())
    assert DeadLetter.objects.get(job_id=rejected.id).attempts == 1
    wait_until(lambda: get_result(down.id).attempts >= 2)  # Unavailable: tried again
    assert get_result(down.id).errors[0]["type"].endswith("Unavailable")


def test_time_limit_results_unique_keys_chains_and_groups(start_worker, mailoutbox):
    Signup.objects.create(email="ada@example.com")
    Signup.objects.create(email="bob@example.org")
    counted = count_signups.delay("example.com")
    assert signups_counted(counted.id) is None
    rebuild_search_index.delay(3)
    build_report.delay("weekly")
    first = sync_once("limited-0")
    assert sync_once("limited-0").id == first.id  # in flight: the same job
    pks = list(Signup.objects.values_list("pk", flat=True))
    assert [job.args for job in welcome_all(pks)] == [[pk] for pk in pks]
    burst(start_worker, "reports", "emails")
    assert signups_counted(counted.id) == 1
    assert Counter.objects.get(name="index-3").value == 1
    assert Counter.objects.get(name="report-weekly").value == 2  # the chain's second step ran
    assert Signup.objects.filter(welcomed_at__isnull=False).count() == 2


def test_the_cron_command_enqueues_one_digest_a_day(mailoutbox):
    call_command("enqueue_daily_digest")
    call_command("enqueue_daily_digest")  # cron ran twice (two hosts): still one job
    (digest,) = enqueued(send_daily_digest)
    assert digest.args == [timezone.localdate().isoformat()]
    Signup.objects.create(email="ada@example.com")
    assert run_jobs(["reports"]).succeeded == 1
    assert mailoutbox[0].body == "1 new."
