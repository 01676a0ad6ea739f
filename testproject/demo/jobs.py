"""Jobs of the demo project. The tests use them as well, so each one records what it did."""

from __future__ import annotations

import asyncio
import os
import time

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from django_pgjobs import RetryPolicy, job
from django_pgjobs.context import current_job

from .models import Counter, Execution, Signup


def _record(label: str) -> None:
    running = current_job()
    Execution.objects.create(
        job_id=running.id if running else 0,
        attempt=running.attempts if running else 0,
        label=label,
        pid=os.getpid(),
    )


@job(queue="emails", max_attempts=5, atomic=True)
def send_welcome_email(signup_id: int) -> None:
    """Pretend to send an email; marks the signup as welcomed in the same transaction."""
    Signup.objects.filter(pk=signup_id, welcomed_at__isnull=True).update(welcomed_at=timezone.now())


@job(queue="default", max_attempts=4, retry=RetryPolicy(base_seconds=0.2, cap_seconds=1.0))
def flaky(label: str, fail_times: int = 1) -> None:
    """Fails its first ``fail_times`` attempts, then succeeds."""
    _record(label)
    running = current_job()
    if running and running.attempts <= fail_times:
        raise ConnectionError(f"flaky service unavailable (attempt {running.attempts})")


@job
def record(label: str, sleep: float = 0.0) -> None:
    """Record one execution (no unique constraint: duplicates would show)."""
    if sleep:
        time.sleep(sleep)
    _record(label)


@job(atomic=True)
def record_atomic(label: str, sleep: float = 0.0) -> None:
    """Record one execution and bump a counter, atomically with the job's completion."""
    if sleep:
        time.sleep(sleep)
    _record(label)
    Counter.objects.get_or_create(name=label)
    Counter.objects.filter(name=label).update(value=F("value") + 1)


@job(max_attempts=1)
def leave_transaction_open(label: str, how: str) -> None:
    """Writes, then returns inside a transaction, as older code and raw SQL sometimes do."""
    if how == "set_autocommit":
        transaction.set_autocommit(False)
    else:
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
    _record(label)


@job
def commit_with_autocommit_off(label: str) -> None:
    """Turns autocommit off, writes and commits: nothing is left open, only the mode."""
    transaction.set_autocommit(False)
    _record(label)
    transaction.commit()


@job
def change_search_path() -> None:
    """Points the session at a schema that does not exist and returns."""
    with connection.cursor() as cursor:
        cursor.execute("SET search_path TO nowhere")


@job(atomic=True)
def hold_row_lock(name: str, seconds: float) -> None:
    """Locks the counter ``name`` and keeps it locked in a long statement."""
    Counter.objects.select_for_update().get(name=name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [seconds])


@job(atomic=True, max_attempts=1)
def close_connection_atomic(label: str) -> None:
    """Writes, then closes its connection inside its atomic transaction."""
    _record(label)
    connection.close()


@job(atomic=True, max_attempts=2, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.1))
def write_then_fail(label: str) -> None:
    """Writes, then raises: atomic, so the write must not survive."""
    _record(label)
    raise RuntimeError("failed after writing")


@job(max_attempts=3, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.2))
def always_fails(message: str = "this job always fails") -> None:
    raise ValueError(message)


@job(max_attempts=2)
def crash_worker() -> None:
    """Kills the worker process outright, every time."""
    os._exit(13)


@job
def noop() -> None:
    pass


@job(max_attempts=3, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.1))
def sleep_then_fail_first(label: str, sleep: float = 0.0) -> None:
    """Sleeps, records, and fails its first attempt (the lease-loss tests pause it mid-sleep)."""
    if sleep:
        time.sleep(sleep)
    _record(label)
    running = current_job()
    if running and running.attempts == 1:
        raise RuntimeError(f"{label}: the first attempt fails")


@job(max_attempts=3)
def interrupt_worker(label: str) -> None:
    """Raises KeyboardInterrupt, as a job reaching a stray Ctrl-C handler would."""
    _record(label)
    raise KeyboardInterrupt


async def _record_async(label: str) -> None:
    _record(label)


@job(max_attempts=1)
def forgets_to_await(label: str):
    """A sync wrapper around async code that returns the coroutine instead of running it."""
    return _record_async(label)


@job(max_attempts=1)
def compare_numbers(label: str, values: list, reprs: list, **named) -> None:
    """Fails unless every value reads back with the repr it was enqueued with (type included);
    a label starting "fail once" also fails its first run after that (to be requeued)."""
    received = [repr(value) for value in values] + [repr(value) for value in named.values()]
    if received != reprs:
        raise AssertionError(f"read back {received}, enqueued {reprs}")
    _record(label)
    if label.startswith("fail once") and Execution.objects.filter(label=label).count() == 1:
        raise RuntimeError(f"{label}: the numbers were right, failing as asked")


@job(max_attempts=2, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.1))
def record_times(label: str, fail_first: bool = False) -> None:
    """Records how long the job waited, computed from its own times and the project's clock (a
    naive and an aware datetime do not subtract: this fails when they disagree)."""
    running = current_job()
    waited = timezone.now() - running.created_at
    late = timezone.now() - running.run_after
    _record(f"{label} waited>=0:{waited.total_seconds() >= 0} late>=0:{late.total_seconds() >= 0}")
    if fail_first and running.attempts == 1:
        raise RuntimeError(f"{label}: the first attempt fails")


@job
async def record_async(label: str, sleep: float = 0.0) -> None:
    """``record`` as an async def job: its execution row written through the async ORM."""
    if sleep:
        await asyncio.sleep(sleep)
    await sync_to_async(_record)(label)


@job(max_attempts=1)
async def leave_transaction_open_async(label: str) -> None:
    """Turns autocommit off on the async ORM's connection and returns without a commit."""

    def write() -> None:
        transaction.set_autocommit(False)
        _record(label)

    await sync_to_async(write)()


async def _in_a_thread(how: str, func) -> None:
    """Runs ``func`` on the event loop's default executor, as ``how`` says."""
    if how == "to_thread":
        await asyncio.to_thread(func)
    elif how == "sync_to_async":
        await sync_to_async(func, thread_sensitive=False)()
    else:  # run_in_executor: the function runs without the job's context
        await asyncio.get_running_loop().run_in_executor(None, func)


@job
async def record_in_a_thread(label: str, how: str = "to_thread", sleep: float = 0.0) -> None:
    """``record`` on the event loop's default executor (not the job's ORM lane)."""

    def write() -> None:
        time.sleep(sleep)
        _record(label)

    await _in_a_thread(how, write)


@job(max_attempts=1)
async def leave_transaction_open_in_a_thread(label: str, how: str = "to_thread") -> None:
    """Turns autocommit off on a default-executor thread's connection, writes, and returns."""

    def write() -> None:
        transaction.set_autocommit(False)
        _record(label)

    await _in_a_thread(how, write)


@job(max_attempts=1, timeout=0.5)
async def sleep_in_a_thread(seconds: float) -> None:
    """A blocking call on the event loop's default executor, past the job's timeout: the job is
    cancelled, the call runs on (nothing can stop a thread)."""
    await asyncio.to_thread(time.sleep, seconds)


@job(max_attempts=1)
async def commit_across_awaits(label: str, others: int) -> None:
    """A manual transaction across awaits: autocommit off, a write, then awaits until ``others``
    executions of other jobs are committed (they started meanwhile), then the commit."""
    await sync_to_async(transaction.set_autocommit)(False)
    await sync_to_async(_record)(label)
    deadline = time.monotonic() + 20
    seen = Execution.objects.exclude(label=label)
    while await seen.acount() < others:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: the other jobs never ran")
        await asyncio.sleep(0.05)
    await sync_to_async(transaction.commit)()
    await sync_to_async(transaction.set_autocommit)(True)


@job
async def record_backend_async(label: str, sleep: float = 0.0) -> None:
    """Records the server process of its ORM connection (``label:pid``), then sleeps."""

    def write() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            _record(f"{label}:{cursor.fetchone()[0]}")

    await sync_to_async(write)()
    await asyncio.sleep(sleep)


@job(max_attempts=1, timeout=0.5)
async def sleep_in_the_database_async(seconds: float) -> None:
    """A long statement through ``sync_to_async``, past its timeout."""

    def sleep() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(%s)", [seconds])

    await sync_to_async(sleep)()


@job(max_attempts=2, retry=RetryPolicy(base_seconds=2.5, cap_seconds=2.5, jitter=0))
async def ignore_cancellation(label: str, seconds: float = 30) -> None:
    """Catches its cancellation (and any error) and goes on writing a row every 0.1 s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            await sync_to_async(_record)(label)
            await asyncio.sleep(0.1)
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - what this job is about
            await asyncio.sleep(0.1)


@job(max_attempts=2, retry=RetryPolicy(base_seconds=0.05, cap_seconds=0.05, jitter=0))
async def ignore_cancellation_retried_at_once(label: str, seconds: float = 30) -> None:
    """``ignore_cancellation`` whose retry starts before the worker gives up on the attempt
    before it (on the same worker, a single one)."""
    await ignore_cancellation.func(label, seconds)


@job(max_attempts=1, timeout=0.5)
async def block_two_calls(seconds: float) -> None:
    """Two blocking calls at once on its ORM lane: the second waits behind the first, so a
    cancellation (its timeout) cancels the waiting one while the first runs on."""
    await asyncio.gather(sync_to_async(time.sleep)(seconds), sync_to_async(time.sleep)(0))


@job(max_attempts=1, timeout=1)
async def block_the_loop(seconds: float) -> None:
    """A blocking call inside an async def: the worker's event loop stops."""
    time.sleep(seconds)


@job(keep_result=True)
async def add_async(a: int, b: int) -> dict:
    """An async job that keeps its return value."""
    await asyncio.sleep(0)
    return {"sum": a + b}


@job(max_attempts=3, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.1))
def abort_self_then_fail(label: str) -> None:
    """Its abort is requested (and committed) while it runs, and it fails before its worker has
    heard of the request: the attempt must still end as aborted, not be retried."""
    from django_pgjobs import abort

    _record(label)
    abort(current_job().id, requested_by="the job itself")
    raise ValueError("failed after its abort was requested")


@job(keep_result=True, max_attempts=3, retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.1))
def record_then_return_a_set(label: str) -> set:
    """Record one execution, then return what JSON cannot hold: its result cannot be kept."""
    _record(label)
    return {label}


@job(max_attempts=1)
def fail_in_the_database(label: str) -> None:
    """Records, then fails on a statement: the transaction it ran in is left aborted."""
    _record(label)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 / 0")


@job
def record_on_commit(label: str) -> None:
    """Records from an ``on_commit`` callback: at once in autocommit, at the commit in a
    transaction."""
    transaction.on_commit(lambda: _record(label))


@job(atomic=True, max_attempts=2)
def record_then_a_callback_fails(label: str) -> None:
    """Records, then registers an ``on_commit`` callback that raises: it runs after the job's
    writes and its completion committed."""
    _record(label)
    transaction.on_commit(_callback_fails)


def _callback_fails() -> None:
    raise RuntimeError("the on_commit callback failed")


@job(max_attempts=3)
def press_ctrl_c() -> None:
    """Raises ``KeyboardInterrupt``, as Ctrl-C pressed while a job runs on the main thread."""
    raise KeyboardInterrupt


@job
def reschedule_forever(label: str) -> None:
    """Records, then enqueues itself again for a minute later, for ever."""
    _record(label)
    reschedule_forever.using(delay=60).enqueue(label)


@job(queue="default", keep_result=True)
def stepwise(gate: str, steps: int) -> int:
    """Waits at each step for the counter ``gate`` to pass it (a test moves it on), reporting
    its progress all the while."""
    running = current_job()
    assert running is not None
    running.set_metadata(gate=gate)
    for step in range(steps):
        # reported at every turn of the wait, as often as it likes: written once a second
        while not Counter.objects.filter(name=gate, value__gt=step).exists():
            running.set_progress(step, steps, note=f"waiting at step {step + 1}")
            time.sleep(0.02)
    running.set_progress(steps, steps, note="all steps done")
    return steps
