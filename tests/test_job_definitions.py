"""What ``@job`` accepts: functions whose call runs the work, names PostgreSQL can store.

A worker counts a job as done when its call returns, so ``async def``, generator and
async-generator functions (whose call returns before their body runs) are refused at ``@job``
time, and a call that returns a coroutine anyway is a failed attempt, never a success.
"""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from django.utils import timezone
from helpers import run_worker

from django_pgjobs import job
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.registry import AsyncJobsNotSupported, registered
from testproject.demo import jobs as demo
from testproject.demo.models import Execution


async def async_job(user_id: int) -> None:
    pass


def generator_job(user_id: int):
    yield user_id


async def async_generator_job(user_id: int):
    yield user_id


class AsyncCallable:
    async def __call__(self, user_id: int) -> None:
        pass


class GeneratorCallable:
    def __call__(self, user_id: int):
        yield user_id


@pytest.mark.parametrize(
    "func, fragment",
    [
        (async_generator_job, "is an async generator function"),
        (generator_job, "is a generator function"),
        (GeneratorCallable(), "is a generator function"),
    ],
)
def test_job_refuses_functions_whose_call_does_not_run_them(func, fragment):
    before = registered()
    with pytest.raises(AsyncJobsNotSupported, match=fragment) as raised:
        job(name="refused.at.definition")(func)
    assert isinstance(raised.value, TypeError)
    assert registered() == before


@pytest.mark.parametrize(
    "func",
    [async_job, functools.partial(async_job, 1), AsyncCallable()],
    ids=["async def", "partial", "async __call__"],
)
def test_job_accepts_async_functions_and_knows_they_are_async(func, request):
    definition = job(name=f"accepted.async.{request.node.callspec.id}".replace(" ", "-"))(func)
    assert definition.is_async
    assert not definition.is_atomic()


def test_atomic_async_jobs_are_refused_at_definition():
    before = registered()
    with pytest.raises(ValueError, match="atomic=True is not available for async def jobs"):
        job(name="refused.atomic.async", atomic=True)(async_job)
    assert registered() == before


def test_plain_callables_are_still_accepted():
    class Plain:
        def __call__(self, user_id: int) -> None:
            pass

    definition = job(name="accepted.callable.instance")(Plain())
    assert definition.run([1], {}) is None


@pytest.mark.django_db(transaction=True)
def test_a_call_returning_a_coroutine_is_a_failed_attempt_in_process(recwarn):
    demo.forgets_to_await.enqueue("never awaited")
    demo.record.enqueue("bystander")
    worker = run_worker()
    assert worker.stats.succeeded == 1
    dead = DeadLetter.objects.get()
    assert dead.error_type == "django_pgjobs.registry.AsyncJobsNotSupported"
    assert "returned a coroutine instead of running" in dead.reason
    assert list(Execution.objects.values_list("label", flat=True)) == ["bystander"]
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


@pytest.mark.django_db(transaction=True)
def test_runjobs_never_reports_an_unawaited_coroutine_as_succeeded(start_worker):
    enqueued = demo.forgets_to_await.enqueue("never awaited")
    demo.record.enqueue("bystander")
    worker = start_worker("--burst", env={"PYTHONWARNINGS": "always"})
    assert worker.wait(60) == 0, worker.output()
    output = worker.output()
    assert "never awaited" not in output
    assert "succeeded=1" in output, output
    dead = DeadLetter.objects.get()
    assert dead.job_id == enqueued.pk and dead.attempts == 1
    assert "it is a plain def, so the worker does not await" in dead.reason
    assert not Job.objects.exists()
    assert list(Execution.objects.values_list("label", flat=True)) == ["bystander"]


# -- names and unique keys PostgreSQL text can hold -------------------------------------------------


@pytest.mark.parametrize("name", ["nul\x00name", "lone\ud800surrogate", "x" * 256])
def test_job_refuses_names_postgresql_cannot_store(name):
    def handler() -> None:
        pass

    before = registered()
    with pytest.raises(ValueError, match="job name"):
        job(name=name)(handler)
    assert registered() == before


@pytest.mark.parametrize("key", ["lone\ud800surrogate", "\udfff", "nul\x00key"])
@pytest.mark.django_db(transaction=True)
def test_unique_keys_postgresql_cannot_store_raise_value_error_naming_the_option(key):
    with pytest.raises(ValueError, match="unique_key"):
        demo.record.using(unique_key=key)
    keyed = job(name="keyed.by.key", unique_key=lambda: f"key:{key}")(demo.noop.func)
    with pytest.raises(ValueError, match="unique_key"):
        keyed.enqueue()
    assert not Job.objects.exists()


def test_using_takes_delay_or_run_after_not_both():
    later = timezone.now() + timedelta(hours=1)
    with pytest.raises(ValueError, match="either delay or run_after"):
        demo.record.using(run_after=later, delay=60)
    assert demo.record.using(delay=60).using(run_after=later).options.run_after == later


def test_timeout_comes_from_the_call_then_the_job_then_the_setting(settings):
    plain = job(name="timeouts.precedence.plain")(lambda: None)
    timed = job(name="timeouts.precedence.timed", timeout=2)(lambda: None)
    assert plain.get_timeout() is None  # none by default
    settings.PGJOBS = {**settings.PGJOBS, "DEFAULT_TIMEOUT_SECONDS": 30}
    assert plain.get_timeout() == 30
    assert timed.get_timeout() == 2
    assert timed.using(timeout=0.5).get_timeout() == 0.5
    for bad in (0, -1, "1", float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            timed.using(timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            job(name="timeouts.precedence.bad", timeout=bad)(lambda: None)
