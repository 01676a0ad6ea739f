"""The parts with no database and no process behind them, tested alone: what a failed attempt
leads to (``decide``), the stop request (``StopState``), the backoff (``RetryPolicy``) and the
checks of job options (``validation``, ``Retry``). Milliseconds each; the real-process tests
show the same rules end to end."""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_pgjobs import validation
from django_pgjobs.backoff import RetryPolicy
from django_pgjobs.limits import MAX_SECONDS, PRIORITY_MAX, PRIORITY_MIN, QUEUE_NAME_MAX
from django_pgjobs.operations import ClaimedJob
from django_pgjobs.registry import JobDefinition
from django_pgjobs.retries import Discard, Retry, check_retry_after
from django_pgjobs.worker.decisions import Decision, decide
from django_pgjobs.worker.stopping import StopState

NO_JITTER = RetryPolicy(base_seconds=3, factor=2, cap_seconds=100, jitter=0)


class Gone(Exception):
    pass


class Flaky(Exception):
    pass


def claimed(attempts: int, max_attempts: int = 3) -> ClaimedJob:
    now = timezone.now()
    return ClaimedJob(
        id=1,
        name="shop.jobs.charge",
        queue="default",
        priority=0,
        args=[],
        kwargs={},
        attempts=attempts,
        max_attempts=max_attempts,
        run_after=now,
        created_at=now,
        claim_token=uuid.uuid4(),
    )


def definition(**options) -> JobDefinition:
    return JobDefinition(func=lambda: None, name="shop.jobs.charge", retry=NO_JITTER, **options)


def test_a_plain_failure_with_attempts_left_waits_the_backoff_of_its_attempt():
    assert decide(claimed(1), definition(), ValueError("x"), "ValueError: x") == Decision(3.0)
    assert decide(claimed(2), definition(), ValueError("x"), "ValueError: x") == Decision(6.0)


def test_the_last_attempt_dead_letters_with_the_count():
    decision = decide(claimed(3), definition(), ValueError("x"), "ValueError: x")
    assert decision == Decision(reason="attempts exhausted (3/3): ValueError: x")


def test_discard_dead_letters_at_once_even_outside_retry_on():
    decision = decide(claimed(1), definition(retry_on=(Flaky,)), Discard("gone"), "Discard: gone")
    assert decision == Decision(reason="discarded by the job: Discard: gone")


def test_retry_after_overrides_the_backoff_and_retry_on():
    job = definition(retry_on=(Flaky,))
    assert decide(claimed(1), job, Retry(after=42), "Retry") == Decision(retry_in=42.0)
    # no delay given: the job's backoff
    assert decide(claimed(2), job, Retry(), "Retry") == Decision(retry_in=6.0)


def test_retry_on_the_last_attempt_is_spent_and_dead_letters():
    decision = decide(claimed(3), definition(), Retry(after=1), "Retry: retry requested in 1s")
    assert decision.retry_in is None
    assert decision.reason == (
        "retry requested on the last attempt (3/3): Retry: retry requested in 1s"
    )


def test_discard_on_dead_letters_at_once():
    decision = decide(claimed(1), definition(discard_on=(Gone,)), Gone(), "Gone")
    assert decision == Decision(reason="discard_on of shop.jobs.charge holds this exception: Gone")


def test_retry_on_retries_its_exceptions_only():
    job = definition(retry_on=(Flaky,))
    assert decide(claimed(1), job, Flaky(), "Flaky") == Decision(retry_in=3.0)
    decision = decide(claimed(1), job, ValueError("x"), "ValueError: x")
    assert decision == Decision(
        reason="not retried (not in retry_on of shop.jobs.charge): ValueError: x"
    )


def test_without_a_policy_of_its_own_a_job_takes_the_settings_backoff():
    with override_settings(PGJOBS={"RETRY_BASE_SECONDS": 5, "RETRY_JITTER": 0}):
        job = JobDefinition(func=lambda: None, name="shop.jobs.charge")
        assert decide(claimed(2), job, ValueError("x"), "ValueError: x") == Decision(10.0)


def test_the_first_stop_request_gives_the_grace_the_second_forces():
    stop = StopState(grace=30)
    assert not stop.requested.is_set() and not stop.past_give_up()
    before = time.monotonic()
    stop.request()
    assert stop.requested.is_set() and not stop.forced.is_set()
    assert before + 30 <= stop.give_up_at <= time.monotonic() + 30
    assert not stop.past_give_up()
    stop.request()
    assert stop.forced.is_set() and stop.past_give_up()


def test_a_forced_stop_ends_the_grace_at_once():
    stop = StopState(grace=30)
    stop.request(force=True)
    assert stop.requested.is_set() and stop.forced.is_set() and stop.past_give_up()
    started = time.monotonic()
    stop.sleep(10)
    assert time.monotonic() - started < 0.5


def test_a_stop_requested_during_a_sleep_cuts_it_to_the_grace():
    stop = StopState(grace=0.2)
    threading.Timer(0.1, stop.request).start()
    started = time.monotonic()
    stop.sleep(10)
    assert 0.25 <= time.monotonic() - started < 2


def test_the_backoff_doubles_up_to_its_cap():
    assert [NO_JITTER.ceiling(attempt) for attempt in range(1, 8)] == [3, 6, 12, 24, 48, 96, 100]
    assert NO_JITTER.ceiling(0) == 3  # never below the base
    # a factor that overflows a float is the cap, not an error
    assert RetryPolicy(factor=1e308, cap_seconds=60).ceiling(50) == 60


def test_jitter_takes_up_to_its_share_off_the_delay():
    policy = RetryPolicy(base_seconds=10, factor=1, jitter=0.5)
    rng = random.Random(3)
    delays = [policy.delay(1, rng) for _ in range(1000)]
    assert all(5 <= delay <= 10 for delay in delays)
    assert max(delays) - min(delays) > 4  # spread over the share, not a constant
    assert RetryPolicy(base_seconds=10, jitter=0).delay(1, rng) == 10


@pytest.mark.parametrize(
    "value, seconds",
    [(None, None), (0, 0.0), (2.5, 2.5), (timedelta(minutes=2), 120.0), (MAX_SECONDS, MAX_SECONDS)],
)
def test_retry_after_takes_seconds_or_a_timedelta(value, seconds):
    assert check_retry_after(value) == seconds


@pytest.mark.parametrize(
    "value, error",
    [
        (True, TypeError),
        ("5", TypeError),
        (-1, ValueError),
        (math.inf, ValueError),
        (math.nan, ValueError),
        (MAX_SECONDS + 1, ValueError),
    ],
)
def test_retry_after_refuses_what_no_delay_can_be(value, error):
    with pytest.raises(error):
        Retry(after=value)


@pytest.mark.parametrize(
    "check, value",
    [
        (validation.check_queue, "default"),
        (validation.check_queue, "emails.high:eu-1_b"),
        (validation.check_queue, "q" * QUEUE_NAME_MAX),
        (validation.check_priority, PRIORITY_MIN),
        (validation.check_priority, PRIORITY_MAX),
        (validation.check_max_attempts, 1),
        (validation.check_delay, 0),
        (validation.check_unique_key, None),
        (validation.check_unique_key, "order-42"),
        (validation.check_name, "shop.jobs.charge"),
    ],
)
def test_valid_options_pass_unchanged(check, value):
    assert check(value) == value


@pytest.mark.parametrize(
    "check, value",
    [
        (validation.check_queue, ""),
        (validation.check_queue, "-leading-dash"),
        (validation.check_queue, "with space"),
        (validation.check_queue, "q" * (QUEUE_NAME_MAX + 1)),
        (validation.check_queue, 7),
        (validation.check_priority, True),
        (validation.check_priority, PRIORITY_MAX + 1),
        (validation.check_priority, 1.0),
        (validation.check_max_attempts, 0),
        (validation.check_delay, -0.1),
        (validation.check_delay, math.nan),
        (validation.check_delay, MAX_SECONDS + 1),
        (validation.check_unique_key, ""),
        (validation.check_unique_key, "nul\x00inside"),
        (validation.check_unique_key, "lone \ud800 surrogate"),
        (validation.check_name, ""),
        (validation.check_name, "n" * 256),
    ],
)
def test_invalid_options_are_refused(check, value):
    with pytest.raises(ValueError):
        check(value)


def test_positive_seconds_refuse_zero_and_name_the_option():
    assert validation.check_positive_seconds("lease_seconds", 1) == 1.0
    with pytest.raises(ValueError, match="^lease_seconds must be"):
        validation.check_positive_seconds("lease_seconds", 0)


def test_run_after_must_carry_a_zone_when_the_project_uses_them():
    aware = timezone.now()
    assert validation.check_run_after(aware) is aware
    with pytest.raises(ValueError, match="timezone-aware"):
        validation.check_run_after(datetime(2030, 1, 1))
    with override_settings(USE_TZ=False):
        naive = datetime(2030, 1, 1)
        assert validation.check_run_after(naive) is naive


def test_an_abort_notice_marks_every_job_before_it_cancels_or_logs_any():
    """An executor freed by the first job's stop takes its next held job at once: that job's
    mark must already be there (an aborted workflow's held step would run otherwise)."""
    from types import SimpleNamespace

    from django_pgjobs.worker.aborts import mark_aborted
    from django_pgjobs.worker.state import DispatcherState

    state = DispatcherState()
    jobs = [SimpleNamespace(id=i, name="j", abort_requested=False) for i in (1, 2, 3)]
    for held in jobs:
        state.held[held.id] = held
    seen_at_each_cancel = []

    class Executors:
        def cancel_async(self, job, error):
            seen_at_each_cancel.append([held.abort_requested for held in jobs])
            return False

    assert mark_aborted(state, Executors(), [1, 2, 3, 99]) == 3
    assert seen_at_each_cancel == [[True, True, True]] * 3
    assert mark_aborted(state, Executors(), [2]) == 0  # marked once
