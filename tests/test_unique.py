"""Unique keys (django_pgjobs/uniqueness.py, docs/howto/unique.md): the scope, debounce and
throttle, each decided by one statement against a unique index; what each enqueue did
(``job.enqueue_outcome``). Concurrency with real producer processes (tests/unique_producer.py)
and real ``runjobs`` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone
from helpers import ROOT, database_url_for_tests, run_worker, wait_until

from django_pgjobs import EnqueueOutcome, db, enqueue_many, job, operations, signals
from django_pgjobs.context import reset_current_job, set_current_job
from django_pgjobs.models import DeadLetter, Job, ThrottleWindow
from django_pgjobs.worker.faults import DispatcherDatabase
from django_pgjobs.worker.maintenance import PruneConfig, Pruner
from django_pgjobs.worker.stopping import StopState
from testproject.demo.models import Counter, Execution
from testproject.handlers.unique import (
    poll_inbox,
    refresh_prices,
    refresh_report,
    reindex_document,
    sync_account,
)

pytestmark = pytest.mark.django_db(transaction=True)

CREATED, REPLACED, SKIPPED = (
    EnqueueOutcome.CREATED,
    EnqueueOutcome.REPLACED,
    EnqueueOutcome.SKIPPED,
)


def producers(kind: str, processes: int, calls: int) -> list[dict]:
    """Run ``processes`` producer processes, started at once, each enqueueing ``calls`` times."""
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "PYTHONUNBUFFERED": "1"}
    script = str(ROOT / "tests" / "unique_producer.py")
    started = [
        subprocess.Popen(
            [sys.executable, script, kind, str(calls)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for process in started:
            assert process.stdout.readline().strip() == "ready"
        for process in started:  # the gate: all of them are set up and connected
            process.stdin.write("go\n")
            process.stdin.flush()
        return [json.loads(process.communicate(timeout=120)[0]) for process in started]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()


def claim_all() -> list[operations.ClaimedJob]:
    """Claim every due job the way a worker's loop does (they are running from then on)."""
    claims = operations.ClaimBuilder(worker="test-worker", queues=None, lease_seconds=60)
    return operations.complete(connection, claim=claims.take(100)).claimed


def fail_for_retry(claimed: operations.ClaimedJob) -> None:
    """The claimed job fails and waits for its retry, due in five minutes (as a worker does)."""
    error = json.dumps([{"type": "RuntimeError", "message": "boom", "attempt": claimed.attempts}])
    params = {"id": claimed.id, "token": claimed.claim_token, "delay_seconds": 300, "error": error}
    assert db.execute(connection, "retry_job", params)


# -- the default scope: in flight ----------------------------------------------------------------


def test_a_held_key_is_skipped_and_the_outcome_says_so():
    sent = []
    signals.job_enqueued.connect(lambda **kw: sent.append(kw["outcome"]), weak=False)
    try:
        first = refresh_report.enqueue(1)
        second = refresh_report.enqueue(1)
    finally:
        signals.job_enqueued.receivers.clear()
    assert (first.enqueue_outcome, second.enqueue_outcome) == (CREATED, SKIPPED)
    assert second.pk == first.pk and sent == [CREATED, SKIPPED]
    assert Job.objects.get().enqueue_outcome is None  # read back: no enqueue said anything
    claim_all()  # running: still held
    assert refresh_report.enqueue(1).enqueue_outcome == SKIPPED
    assert refresh_report.enqueue(2).enqueue_outcome == CREATED


# -- the scope "waiting" -------------------------------------------------------------------------


def test_the_scope_waiting_frees_the_key_when_a_worker_takes_the_job():
    first = refresh_prices.enqueue()
    assert (first.waiting_key, first.unique_key) == ("refresh-prices", None)
    assert refresh_prices.enqueue().pk == first.pk
    claim_all()
    assert Job.objects.get(pk=first.pk).waiting_key is None  # the claim released it
    second = refresh_prices.enqueue()
    assert second.enqueue_outcome == CREATED and second.pk != first.pk
    # the running one fails and comes back to wait: no conflict, it no longer holds the key
    Job.objects.filter(pk=first.pk).update(status="ready", claim_token=None)
    assert refresh_prices.enqueue().enqueue_outcome == SKIPPED


def test_the_scope_waiting_a_job_handed_back_unstarted_takes_its_key_back():
    first = refresh_prices.enqueue()
    (claimed,) = claim_all()
    assert operations.release_jobs(connection, [claimed]) == {first.pk}  # graceful shutdown
    assert refresh_prices.enqueue().pk == first.pk  # skipped: it holds its key again
    (claimed,) = claim_all()
    handed = operations.defer_unknown_jobs(connection, [claimed], grace_seconds=600, delay=0)
    assert handed == {first.pk} and refresh_prices.enqueue().pk == first.pk
    claim_all()  # held, never started, its worker gone: the rescue gives it back
    expired = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=first.pk).update(started_at=None, lease_expires_at=expired)
    assert operations.rescue(connection).returned_unstarted == 1
    assert Job.objects.get(pk=first.pk).waiting_key == "refresh-prices"
    # a job enqueued while it was out keeps the key; the one handed back waits without one
    (claimed,) = claim_all()
    second = refresh_prices.enqueue()
    operations.release_jobs(connection, [claimed])
    assert list(Job.objects.filter(waiting_key__isnull=False).values_list("pk", flat=True)) == [
        second.pk
    ]
    # two of one key handed back in one statement: one takes it
    assert len(operations.release_jobs(connection, claim_all())) == 2
    assert Job.objects.filter(waiting_key="refresh-prices").count() == 1


def test_the_scope_waiting_a_requeued_dead_letter_waits_holding_its_key():
    refresh_prices.enqueue()
    (claimed,) = claim_all()
    error = json.dumps([{"type": "RuntimeError", "message": "boom"}])
    params = {"reason": "r", "error_type": "RuntimeError", "error": error}
    params.update(id=claimed.id, token=claimed.claim_token)
    assert db.execute(connection, "dead_letter_job", params)
    dead = DeadLetter.objects.get()
    assert (dead.unique_key, dead.waiting_key) == (None, "refresh-prices")
    waiting = refresh_prices.enqueue()
    assert operations.requeue_dead_letters(connection, [dead.pk]) == []  # held: it stays
    Job.objects.filter(pk=waiting.pk).delete()
    (requeued,) = operations.requeue_dead_letters(connection, [dead.pk])
    assert Job.objects.get(pk=requeued).waiting_key == "refresh-prices"
    assert refresh_prices.enqueue().pk == requeued


def test_the_scope_waiting_does_not_keep_two_runs_of_a_key_apart():
    refresh_prices.enqueue()
    claim_all()  # the first runs
    refresh_prices.enqueue()
    claim_all()  # the one waiting is taken as soon as it is due
    assert Job.objects.filter(status="running", name=refresh_prices.name).count() == 2


def test_the_admin_finds_a_job_by_its_waiting_key(admin_client):
    waiting = refresh_prices.enqueue()
    response = admin_client.get("/admin/django_pgjobs/job/?q=refresh-prices")
    assert [j.pk for j in response.context["cl"].result_list] == [waiting.pk]
    page = admin_client.get(f"/admin/django_pgjobs/job/{waiting.pk}/change/").content.decode()
    assert "refresh-prices" in page


def test_the_scope_waiting_lets_a_new_job_in_while_one_runs(start_worker):
    Counter.objects.create(name="release")
    running = refresh_prices.enqueue(hold="release")
    start_worker("--queue", "unique", "--poll-interval", "0.2")
    wait_until(lambda: Execution.objects.filter(job_id=running.pk).exists(), timeout=60)
    # the running refresh does not hold the key: one more may wait (due later: no worker
    # takes it here), and only one
    waiting = refresh_prices.using(delay=3600).enqueue()
    again = refresh_prices.using(delay=3600).enqueue()
    assert (waiting.enqueue_outcome, again.enqueue_outcome) == (CREATED, SKIPPED)
    assert again.pk == waiting.pk != running.pk
    assert Job.objects.get(pk=running.pk).status == "running"  # all along
    Counter.objects.filter(name="release").update(value=1)
    wait_until(lambda: not Job.objects.filter(pk=running.pk).exists(), timeout=60)
    assert list(Job.objects.values_list("pk", "status")) == [(waiting.pk, "ready")]


# -- debounce ------------------------------------------------------------------------------------


def test_debounce_replaces_the_arguments_and_moves_run_after():
    first = reindex_document.using(delay=60).enqueue(5, title="draft")
    later = reindex_document.using(delay=600).enqueue(5, title="final")
    assert (first.enqueue_outcome, later.enqueue_outcome) == (CREATED, REPLACED)
    stored = Job.objects.get()
    assert (stored.pk, later.pk, stored.kwargs, later.kwargs) == (
        first.pk,
        first.pk,
        {"title": "final"},
        {"title": "final"},
    )
    assert stored.run_after > first.run_after + timedelta(seconds=500)
    assert stored.run_after == later.run_after


def test_debounce_can_replace_only_the_arguments_or_only_run_after():
    first = reindex_document.using(delay=60, debounce="args").enqueue(6, title="a")
    reindex_document.using(delay=600, debounce="args").enqueue(6, title="b")
    stored = Job.objects.get(pk=first.pk)
    assert (stored.kwargs, stored.run_after) == ({"title": "b"}, first.run_after)
    reindex_document.using(delay=900, debounce="run_after").enqueue(6, title="c")
    stored = Job.objects.get(pk=first.pk)
    assert stored.kwargs == {"title": "b"} and stored.run_after > first.run_after
    assert reindex_document.using(debounce=False).enqueue(6).enqueue_outcome == SKIPPED


def test_debounce_leaves_a_running_holder_alone():
    first = reindex_document.enqueue(7, title="a")
    claim_all()
    skipped = reindex_document.enqueue(7, title="b")
    assert (skipped.enqueue_outcome, skipped.pk) == (SKIPPED, first.pk)
    assert Job.objects.get().kwargs == {"title": "a"}
    # with the scope "waiting", a new job waits instead
    waiting = reindex_document.using(unique_scope="waiting").enqueue(7, title="c")
    replaced = reindex_document.using(unique_scope="waiting").enqueue(7, title="d")
    assert (waiting.enqueue_outcome, replaced.enqueue_outcome) == (CREATED, REPLACED)
    assert Job.objects.get(pk=waiting.pk).kwargs == {"title": "d"}


def test_debounce_of_a_job_waiting_for_its_retry_gives_the_newer_call_its_whole_budget():
    first = reindex_document.using(max_attempts=2).enqueue(8, title="draft")
    (claimed,) = claim_all()
    fail_for_retry(claimed)  # attempt 1 of 2 spent, its retry due in five minutes
    later = reindex_document.enqueue(8, title="final")
    stored = Job.objects.get()
    assert (later.enqueue_outcome, stored.pk, stored.kwargs) == (
        REPLACED,
        first.pk,
        {"title": "final"},
    )
    # the newer call's tries, all of them (attempt 1 is not run again: the next is attempt 2)
    assert (stored.attempts, stored.max_attempts) == (1, 1 + reindex_document.get_max_attempts())
    assert stored.run_after <= timezone.now() and len(stored.errors) == 1


def test_eight_producer_processes_debouncing_one_key_leave_one_job_with_the_last_arguments():
    results = producers("reindex", processes=8, calls=100)
    outcomes = [outcome for result in results for outcome in result["outcomes"]]
    assert len(outcomes) == 800
    assert outcomes.count("created") == 1 and outcomes.count("replaced") == 799
    (job,) = Job.objects.all()
    assert job.args == [42] and job.status == "ready"
    # The last write to commit is some producer's last call (each producer's calls commit in
    # order), so the job holds one of those.
    last_calls = {f"{result['pid']}:99" for result in results}
    assert job.kwargs["title"] in last_calls


# -- throttle ------------------------------------------------------------------------------------


def test_throttle_lets_one_job_per_window_through_even_after_it_finished():
    results = producers("sync", processes=4, calls=50)
    outcomes = [outcome for result in results for outcome in result["outcomes"]]
    assert outcomes.count("created") == 1 and outcomes.count("skipped") == 199
    run_worker(queues=["unique"])  # the job runs and its row is deleted ...
    assert not Job.objects.exists() and Execution.objects.count() == 1
    skipped = sync_account.enqueue(7)  # ... and the window still holds
    assert skipped.enqueue_outcome == SKIPPED and skipped.pk is None  # unsaved: none holds it
    assert not Job.objects.exists()
    # the 10 s are over (by the database's clock, which the statement reads): the next window
    ThrottleWindow.objects.update(ends_at=F("ends_at") - timedelta(seconds=10))
    assert [sync_account.enqueue(7).enqueue_outcome for _ in range(5)] == [CREATED] + [SKIPPED] * 4


def test_a_short_throttle_opens_the_next_window_when_the_period_is_over():
    short = sync_account.using(throttle=0.5)
    first = short.enqueue(8)
    run_worker(queues=["unique"])
    outcomes = []

    def next_one_created() -> bool:
        outcomes.append(short.enqueue(8).enqueue_outcome)
        return outcomes[-1] == CREATED

    wait_until(next_one_created, timeout=30, interval=0.05)
    assert first.enqueue_outcome == CREATED and set(outcomes[:-1]) <= {SKIPPED}
    second = Job.objects.get()
    assert second.created_at - first.created_at >= timedelta(seconds=0.5)


def test_a_throttled_job_enqueueing_its_own_key_hands_it_over_only_when_the_window_opens():
    held = sync_account.enqueue(7)  # opens the window for ten seconds
    (claimed,) = claim_all()
    token = set_current_job(claimed)
    try:
        skipped = sync_account.enqueue(7)  # the window is open: skipped, the key stays
    finally:
        reset_current_job(token)
    assert (skipped.enqueue_outcome, skipped.pk) == (SKIPPED, held.pk)
    assert Job.objects.get(pk=held.pk).unique_key == "sync:7"
    other = refresh_report.using(unique_key="sync:7").enqueue(1)
    assert (other.enqueue_outcome, other.pk) == (SKIPPED, held.pk)  # held while it runs
    ThrottleWindow.objects.update(ends_at=timezone.now() - timedelta(seconds=1))
    token = set_current_job(claimed)
    try:
        successor = sync_account.enqueue(7)  # the window opens: handed over in the statement
    finally:
        reset_current_job(token)
    assert successor.enqueue_outcome == CREATED and successor.unique_key == "sync:7"
    assert Job.objects.get(pk=held.pk).unique_key is None


def test_a_throttled_skip_with_no_holder_returns_the_unsaved_job_with_its_scopes_key():
    first = sync_account.using(unique_scope="waiting").enqueue(9)
    claim_all()
    Job.objects.filter(pk=first.pk).delete()  # done; its window stays open
    skipped = sync_account.using(unique_scope="waiting").enqueue(9)
    assert (skipped.enqueue_outcome, skipped.pk) == (SKIPPED, None)
    assert (skipped.unique_key, skipped.waiting_key) == (None, "sync:9")
    Job.objects.filter(pk=sync_account.enqueue(10).pk).delete()  # the scope 'in_flight'
    skipped = sync_account.enqueue(10)
    assert (skipped.pk, skipped.unique_key, skipped.waiting_key) == (None, "sync:10", None)


def test_the_throttle_window_is_the_key_strings_across_scopes_and_job_names():
    assert sync_account.enqueue(12).enqueue_outcome == CREATED
    Job.objects.all().delete()  # done: only the window is left
    assert sync_account.using(unique_scope="waiting").enqueue(12).enqueue_outcome == SKIPPED
    other = refresh_report.using(unique_key="sync:12", throttle=10).enqueue(1)
    assert other.enqueue_outcome == SKIPPED and not Job.objects.exists()


def test_the_pruner_deletes_ended_throttle_windows_only():
    sync_account.enqueue(1)
    sync_account.enqueue(2)
    ThrottleWindow.objects.filter(key="sync:1").update(ends_at=timezone.now() - timedelta(1))
    database = DispatcherDatabase("default", StopState(grace=0))
    assert Pruner(database, PruneConfig(keep_succeeded_seconds=3600.0)).run_once() == 1
    assert list(ThrottleWindow.objects.values_list("key", flat=True)) == ["sync:2"]


# -- the self-rescheduling job -------------------------------------------------------------------


def test_a_job_rescheduling_itself_with_a_fixed_key_runs_5_times_in_a_row(start_worker):
    Counter.objects.create(name="polls")
    poll_inbox.enqueue(5)
    start_worker("--queue", "unique", "--poll-interval", "0.2")
    wait_until(
        lambda: Counter.objects.get(name="polls").value == 5 and not Job.objects.exists(),
        timeout=60,
    )
    runs = Execution.objects.order_by("at", "id")
    assert [run.label for run in runs] == [f"poll-inbox:{n}" for n in (5, 4, 3, 2, 1)]
    assert len({run.job_id for run in runs}) == 5


def test_the_hand_over_is_the_running_jobs_own_and_fenced():
    held = refresh_report.enqueue(3)
    (claimed,) = claim_all()
    impostor = claimed.__class__(**{**claimed.__dict__, "claim_token": held.claim_token})
    token = set_current_job(impostor)  # a job that lost its claim hands nothing over
    try:
        assert refresh_report.enqueue(3).enqueue_outcome == SKIPPED
    finally:
        reset_current_job(token)
    token = set_current_job(claimed)
    try:
        other = refresh_report.enqueue(4)  # another key: its own row keeps its key
        assert Job.objects.get(pk=held.pk).unique_key == "report:3"
        successor = refresh_report.enqueue(3)
    finally:
        reset_current_job(token)
    assert (other.enqueue_outcome, successor.enqueue_outcome) == (CREATED, CREATED)
    assert Job.objects.get(pk=held.pk).unique_key is None
    assert Job.objects.get(pk=successor.pk).unique_key == "report:3"


def test_enqueue_many_of_the_running_jobs_own_key_hands_it_over():
    held = refresh_report.enqueue(11)
    (claimed,) = claim_all()
    token = set_current_job(claimed)
    try:
        made = enqueue_many(refresh_report, [(11,), (12,)])
    finally:
        reset_current_job(token)
    assert [job.unique_key for job in made] == ["report:11", "report:12"]
    assert Job.objects.get(pk=held.pk).unique_key is None


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_scope": "running"}, "unique_scope must be 'in_flight'"),
        ({"debounce": "kwargs"}, "debounce must be True"),
        ({"debounce": 1}, "debounce must be True"),
        ({"throttle": 0}, "throttle must be a number of seconds"),
        ({"throttle": 5, "debounce": True}, "debounce and throttle cannot be combined"),
    ],
)
def test_bad_unique_options_raise_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        refresh_report.using(**options)


def test_unique_rules_without_a_key_and_in_enqueue_many_raise():
    from testproject.demo.jobs import record

    with pytest.raises(ValueError, match="apply to a unique key"):
        record.using(debounce=True).enqueue("x")
    with pytest.raises(ValueError, match="enqueue_many takes the default unique rules only"):
        enqueue_many(reindex_document, [(1,)])
    with pytest.raises(ValueError, match="debounce and throttle cannot be combined"):
        job(name="tests.both", unique_key=lambda: "k", debounce=True, throttle=3)(print)
    # the later option wins: a throttle given drops the job's debounce
    assert reindex_document.using(throttle=30).enqueue(9).enqueue_outcome == CREATED
    assert ThrottleWindow.objects.filter(key="reindex:9").exists()
    assert not Job.objects.filter(waiting_key__isnull=False).exists()
