"""The bad-input suite: everything a caller, a forged row, a handler or a settings file can get
wrong, in one place.

Each case ends in a precise exception at the call site (and nothing written), or in a dead letter
or failed attempt with a readable reason, and nothing else is lost: the caller's transaction
stays usable and the worker keeps going. docs/reliability.md lists every case.
"""

from __future__ import annotations

import datetime as dt
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import override_settings
from helpers import drain, run_worker

from django_pgjobs import UnknownJobError, enqueue, job
from django_pgjobs.checks import check_database, check_settings
from django_pgjobs.db import JobsTableMissing
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.payload import ArgumentsNotJSON, PayloadTooLarge
from testproject.demo import jobs as demo
from testproject.demo.models import Execution, Signup

pytestmark = pytest.mark.django_db(transaction=True)


def _circular() -> list:
    loop: list = []
    loop.append(loop)
    return loop


def _deep(levels: int) -> list:
    outer = inner = []
    for _ in range(levels):
        inner.append([])
        inner = inner[0]
    return outer


# -- arguments at enqueue: TypeError (ArgumentsNotJSON), nothing written ---------------------------


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        ((object(),), {}, "args[0] is a builtins.object"),
        ((), {"sleep": dt.datetime(2024, 1, 1)}, "datetime.datetime"),
        (({"nested": [{"set": {1, 2}}]},), {}, "builtins.set"),
        ((b"bytes",), {}, "builtins.bytes"),
        ((float("nan"),), {}, "NaN"),
        ((float("inf"),), {}, "Infinity"),
        ((float("-inf"),), {}, "Infinity"),
        (("a\x00b",), {}, "NUL"),
        (({"key\x00": 1},), {}, "NUL"),
        (({1: "one"},), {}, "key 1 of type int"),
        (({None: "none"},), {}, "key None of type NoneType"),
        (("lone surrogate \ud800",), {}, "surrogate"),
        ((10**5000,), {}, "digits"),
        ((_circular(),), {}, "circular"),
        ((_deep(5000),), {}, "deep"),
    ],
    ids=[
        "object",
        "datetime",
        "set",
        "bytes",
        "nan",
        "infinity",
        "minus-infinity",
        "nul-in-string",
        "nul-in-key",
        "int-key",
        "none-key",
        "lone-surrogate",
        "huge-int",
        "circular",
        "too-deep",
    ],
)
def test_non_json_arguments_raise_type_error_and_write_nothing(args, kwargs, fragment):
    with transaction.atomic():
        Signup.objects.create(email="caller@example.com")
        with pytest.raises(TypeError) as excinfo:
            demo.record.enqueue(*args, **kwargs)
        assert isinstance(excinfo.value, ArgumentsNotJSON)
        assert fragment in str(excinfo.value)
        # The caller's transaction is still usable.
        Signup.objects.create(email="after@example.com")
    assert Job.objects.count() == 0
    assert Signup.objects.count() == 2


def test_payload_over_the_limit_raises_payload_too_large(settings):
    settings.PGJOBS = {**settings.PGJOBS, "MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(PayloadTooLarge, match="MAX_PAYLOAD_BYTES"):
        demo.record.enqueue("x" * 200)
    with pytest.raises(PayloadTooLarge):
        demo.noop.enqueue_many([()] * 3 + [((), {"padding": "é" * 60})])
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        ((), {}, "missing a required argument: 'label'"),
        (("a", 1, 2), {}, "too many positional arguments"),
        (("a",), {"colour": "red"}, "unexpected keyword argument 'colour'"),
        (("a",), {"label": "b"}, "multiple values for argument 'label'"),
    ],
)
def test_arguments_that_do_not_fit_the_function_raise_type_error(args, kwargs, fragment):
    with pytest.raises(TypeError, match=fragment):
        demo.record.enqueue(*args, **kwargs)
    with pytest.raises(TypeError, match=fragment):
        demo.record.enqueue_many([(args, kwargs)])
    assert Job.objects.count() == 0


def test_enqueue_many_rejects_calls_of_the_wrong_shape():
    with pytest.raises(TypeError, match="args tuple/list or an"):
        demo.noop.enqueue_many(["not a call"])
    assert Job.objects.count() == 0


# -- options at enqueue: ValueError naming the option, nothing written -----------------------------


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"priority": 101}, "priority must be between -100 and 100"),
        ({"priority": -101}, "priority must be between -100 and 100"),
        ({"priority": "high"}, "priority must be an int"),
        ({"priority": 1.5}, "priority must be an int"),
        ({"priority": True}, "priority must be an int"),
        ({"queue": ""}, "queue must be 1..100 characters"),
        ({"queue": "x" * 101}, "queue must be 1..100 characters"),
        ({"queue": "bad queue"}, "queue must be"),
        ({"queue": "-starts-with-dash"}, "queue must be"),
        ({"queue": "emails'; DROP TABLE pgjobs_job; --"}, "queue must be"),
        ({"queue": "nul\x00"}, "queue must be"),
        ({"queue": 7}, "queue must be a string"),
        ({"max_attempts": 0}, "max_attempts must be between 1 and 1000"),
        ({"max_attempts": -3}, "max_attempts must be between 1 and 1000"),
        ({"max_attempts": 1001}, "max_attempts must be between 1 and 1000"),
        ({"max_attempts": "5"}, "max_attempts must be an int"),
        ({"delay": -1}, "delay must be a number of seconds from 0 to 315,360,000"),
        ({"delay": float("nan")}, "delay must be a number of seconds from 0"),
        ({"delay": float("inf")}, "delay must be a number of seconds from 0"),
        ({"delay": 1e300}, "delay must be a number of seconds from 0 to 315,360,000"),
        ({"delay": "60"}, "delay must be a number of seconds"),
        ({"run_after": dt.datetime(2030, 1, 1)}, "run_after must be timezone-aware"),
        ({"run_after": "2030-01-01T00:00:00Z"}, "run_after must be a datetime"),
        ({"unique_key": ""}, "unique_key must be a non-empty string"),
        ({"unique_key": "k" * 256}, "unique_key must be a non-empty string"),
        ({"unique_key": "nul\x00key"}, "unique_key must not contain"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, fragment):
    with pytest.raises(ValueError) as excinfo:
        demo.record.using(**options).enqueue("x")
    assert fragment in str(excinfo.value)
    assert Job.objects.count() == 0


@job(unique_key=lambda label: 42)
def keyed_by_a_number(label: str) -> None:
    pass


def test_unique_key_function_returning_a_non_string_raises():
    with pytest.raises(ValueError, match="unique_key must be a non-empty string"):
        keyed_by_a_number.enqueue("x")
    assert Job.objects.count() == 0


@job(unique_key=lambda report, fmt: f"report:{report}:{fmt}")
def render_report(report: int, fmt: str = "pdf") -> None:
    pass


@job(unique_key=lambda report, fmt="pdf": f"report:{report}:{fmt}" + report)
def render_broken_key(report: int, fmt: str = "pdf") -> None:
    pass


def test_a_unique_key_function_that_does_not_take_the_call_says_so_naming_the_job():
    """It is called with the arguments as given: a call leaning on the job's default does not
    reach a key function without that default, and the error says why."""
    with pytest.raises(TypeError) as excinfo:
        render_report.enqueue(1)
    said = str(excinfo.value)
    assert said.startswith(f"unique_key of {render_report.name} does not take this call's")
    assert "missing 1 required positional argument: 'fmt'" in said
    assert "defaults not filled in" in said
    assert render_report.enqueue(1, "pdf").unique_key == "report:1:pdf"
    # a TypeError of the function's own code is its own, unchanged
    with pytest.raises(TypeError, match="can only concatenate str"):
        render_broken_key.enqueue(1)
    assert Job.objects.count() == 1


def test_unregistered_names_at_enqueue_raise_unknown_job_error():
    with pytest.raises(UnknownJobError, match="'os.system' is not a registered job"):
        enqueue("os.system", "echo hi")
    with pytest.raises(UnknownJobError, match="is not a job"):
        enqueue(print, "not a job")
    with pytest.raises(UnknownJobError):
        enqueue("testproject.demo.jobs._record", "private helper, not a job")
    assert Job.objects.count() == 0


# -- rows a worker cannot run: dead letters with a readable reason, the worker keeps going --------


def test_forged_rows_naming_an_unregistered_callable_are_dead_lettered_never_run(tmp_path):
    marker = tmp_path / "pwned"
    Job.objects.create(name="os.system", args=[f"touch {marker}"])
    Job.objects.create(name="subprocess.run", args=[["touch", str(marker)]])
    Job.objects.create(name="builtins.eval", args=["__import__('os').getpid()"])
    Job.objects.create(name="testproject.demo.jobs._record", args=["not a job"])
    demo.record.enqueue("fine")
    worker = run_worker()
    assert not marker.exists()
    dead = list(DeadLetter.objects.order_by("job_id"))
    assert [d.name for d in dead] == [
        "os.system",
        "subprocess.run",
        "builtins.eval",
        "testproject.demo.jobs._record",
    ]
    assert all(d.error_type == "UnknownJob" for d in dead)
    assert "unknown job 'os.system': no function is registered" in dead[0].reason
    assert worker.stats.succeeded == 1
    assert Execution.objects.filter(label="not a job").count() == 0


def test_a_row_nested_deeper_than_python_can_decode_is_dead_lettered():
    """jsonb stores nesting deeper than json.loads can read back (RecursionError). Such a row
    (written around enqueue(), which caps nesting at 100) is dead-lettered; the worker that
    claimed it, and the rest of its batch, carry on."""
    # deeper than any supported Python decodes (3.13's C recursion limit is 10,000; older ones
    # stop near 1,000), shallower than PostgreSQL's default max_stack_depth parses (~15,000)
    depth = 12_000
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, "
            "attempts, max_attempts, created_at, worker, errors) VALUES (%s, 'default', 0, "
            "%s::jsonb, '{}', 'ready', now(), 0, 5, now(), '', '[]')",
            [demo.record.name, "[" * depth + "]" * depth],
        )
    demo.record.enqueue("fine")
    worker = run_worker()
    dead = DeadLetter.objects.defer("args").get()
    assert dead.error_type == "BadArguments"
    assert (
        dead.reason == f"arguments do not fit {demo.record.name}: args nests deeper than "
        "Python can decode"
    )
    assert worker.stats.succeeded == 1 and Execution.objects.get().label == "fine"


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        ({"label": "x"}, {}, "args must be a JSON array, not dict"),
        ("just a string", {}, "args must be a JSON array, not str"),
        (None, {}, "args must be a JSON array, not NoneType"),
        (["x"], ["not", "a", "dict"], "kwargs must be a JSON object, not list"),
        (["x"], 3, "kwargs must be a JSON object, not int"),
        (["x", 1, 2, 3], {}, "too many positional arguments"),
        ([], {"nope": 1}, "missing a required argument"),
    ],
)
def test_rows_whose_arguments_do_not_fit_are_dead_lettered(args, kwargs, fragment):
    from django.db.models import Value
    from django.db.models.fields.json import JSONField

    Job.objects.create(
        name=demo.record.name, args=Value(args, output_field=JSONField()), kwargs=kwargs
    )
    demo.record.enqueue("fine")
    worker = run_worker()
    dead = DeadLetter.objects.get()
    assert dead.error_type == "BadArguments" and fragment in dead.reason
    assert worker.stats.succeeded == 1


def test_row_with_attempts_already_spent_gets_one_last_attempt_not_a_stuck_queue():
    """An operator lowered max_attempts of a retrying job below the attempts it already had:
    the claim must not trip over the attempts check (that would stop every worker)."""
    row = demo.always_fails.enqueue("lowered")
    Job.objects.filter(pk=row.pk).update(attempts=2, max_attempts=2)
    demo.record.enqueue("behind it")
    worker = run_worker()
    dead = DeadLetter.objects.get()
    assert dead.job_id == row.pk and dead.attempts == 3
    assert dead.reason.startswith("attempts exhausted (3/3): ValueError: lowered")
    assert worker.stats.succeeded == 1


# -- handlers that misbehave: a failed attempt with a readable error, the worker keeps going ------


@job(max_attempts=1)
def exits_with_system_exit() -> None:
    sys.exit(3)


@job(max_attempts=2)
def raises_huge_error(size: int) -> None:
    raise ValueError("x" * size)


@job(max_attempts=2)
def raises_nul_in_message() -> None:
    raise ValueError("bad byte \x00 in input")


@job(max_attempts=2)
def raises_lone_surrogate() -> None:
    raise ValueError("undecodable \udcff input")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


@job(max_attempts=2)
def raises_unprintable() -> None:
    raise UnprintableError()


LongNamedError = type("E" * 300, (Exception,), {})


@job(max_attempts=1)
def raises_long_named_error() -> None:
    raise LongNamedError("an exception class with a 300-character name")


@job(atomic=True, max_attempts=1)
def rolls_back_its_own_transaction(label: str) -> None:
    Execution.objects.create(job_id=0, label=label, pid=0)
    transaction.set_rollback(True)


def test_exception_class_with_a_very_long_name_is_a_dead_letter():
    raises_long_named_error.enqueue()
    demo.record.enqueue("after")
    worker = run_worker()
    dead = DeadLetter.objects.get()
    assert dead.error_type == "test_bad_input." + "E" * (255 - len("test_bad_input."))
    assert "a 300-character name" in dead.reason
    assert worker.stats.succeeded == 1


def test_atomic_job_that_marks_its_transaction_for_rollback_is_a_failure():
    """Its completion rolled back with it: a success would leave the job running until its
    lease expired, then run it again."""
    rolls_back_its_own_transaction.enqueue("rolled back")
    worker = run_worker()
    dead = DeadLetter.objects.get()
    assert dead.error_type == "django_pgjobs.worker.RolledBack"
    assert "marked its transaction for rollback" in dead.reason
    assert not Execution.objects.exists() and not Job.objects.exists()
    assert worker.stats.succeeded == 0


def test_system_exit_in_a_job_is_a_failure_not_a_dead_worker():
    exits_with_system_exit.enqueue()
    demo.record.enqueue("after")
    worker = run_worker()
    dead = DeadLetter.objects.get()
    assert dead.error_type == "SystemExit"
    assert dead.reason == "attempts exhausted (1/1): SystemExit: 3"
    assert worker.stats.succeeded == 1


def test_keyboard_interrupt_in_a_job_shuts_the_worker_down_cleanly(start_worker):
    """A real runjobs process: the job's attempt is recorded as failed, the process exits 0."""
    enqueued = demo.interrupt_worker.enqueue("ctrl-c")
    demo.record.using(delay=3600).enqueue("never claimed")
    worker = start_worker("--concurrency", "1")
    assert worker.wait(60) == 0, worker.output()
    assert "raised KeyboardInterrupt: shutting down" in worker.output()
    row = Job.objects.get(pk=enqueued.pk)
    assert row.status == "ready" and row.attempts == 1
    (error,) = row.errors
    assert error["type"] == "KeyboardInterrupt"
    assert Execution.objects.filter(label="ctrl-c").count() == 1


def test_enormous_error_messages_are_stored_truncated(settings):
    settings.PGJOBS = {**settings.PGJOBS, "MAX_ERROR_CHARS": 1000}
    raises_huge_error.enqueue(5_000_000)
    drain()
    dead = DeadLetter.objects.get()
    for error in dead.errors:
        assert len(error["message"]) < 1100 and "characters truncated" in error["message"]
        assert len(error["traceback"]) < 1100
    assert len(dead.reason) < 400
    assert dead.reason.startswith("attempts exhausted (2/2): ValueError: xxx")


@pytest.mark.parametrize(
    "handler, fragment",
    [
        (raises_nul_in_message, "bad byte \\x00 in input"),
        (raises_lone_surrogate, "undecodable \\udcff input"),
        (raises_unprintable, "<exception str() failed>"),
    ],
    ids=["nul", "lone-surrogate", "broken-str"],
)
def test_error_messages_jsonb_cannot_store_are_escaped_and_the_worker_keeps_going(
    handler, fragment
):
    handler.enqueue()
    demo.record.enqueue("after")
    drain()
    dead = DeadLetter.objects.get()
    assert [e["attempt"] for e in dead.errors] == [1, 2]
    assert all(fragment in e["message"] for e in dead.errors), dead.errors
    assert fragment in dead.reason
    assert Execution.objects.filter(label="after").count() == 1


# -- installation mistakes: a clear message naming the fix ----------------------------------------

TABLES = ["pgjobs_job", "pgjobs_deadletter", "pgjobs_worker", "pgjobs_queue", "pgjobs_stat"]


def _rename_tables(suffix_from: str, suffix_to: str) -> None:
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table}{suffix_from} RENAME TO {table}{suffix_to}")


def test_enqueue_and_runjobs_before_migrate_name_migrate(start_worker):
    _rename_tables("", "_away")
    try:
        with pytest.raises(JobsTableMissing, match="run `python manage.py migrate` first"):
            demo.record.enqueue("x")
        worker = start_worker("--burst")
        assert worker.wait(60) == 1
        output = worker.output()
        assert "CommandError" in output and "python manage.py migrate" in output, output
        assert "Traceback" not in output, output
    finally:
        _rename_tables("_away", "")


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_non_postgresql_database_is_system_check_e001():
    from django.conf import settings
    from django.db import connections

    databases = {**settings.DATABASES, "lite": {"ENGINE": "django.db.backends.sqlite3"}}

    def reset_connection_settings():
        connections.__dict__.pop("settings", None)
        connections._settings = None

    try:
        with override_settings(DATABASES=databases, PGJOBS={"DATABASE": "lite"}):
            reset_connection_settings()
            messages = check_database()
            del connections["lite"]
    finally:
        reset_connection_settings()
    assert [m.id for m in messages] == ["pgjobs.E001"]
    assert "needs PostgreSQL" in messages[0].msg and "sqlite3" in messages[0].msg


@pytest.mark.parametrize(
    "pgjobs, fragment",
    [
        ({"LEASE_SECONDZ": 1}, "unknown key 'LEASE_SECONDZ'"),
        ({"MAX_PAYLOAD_BYTES": -1}, "MAX_PAYLOAD_BYTES must be greater than 0"),
        ({"REDACT_KEYS": "password"}, "REDACT_KEYS must be list or tuple"),
        ({"DEFAULT_QUEUE": 5}, "DEFAULT_QUEUE must be str"),
    ],
)
def test_invalid_settings_are_system_check_e002(pgjobs, fragment):
    with override_settings(PGJOBS=pgjobs):
        messages = check_settings()
    assert {m.id for m in messages} == {"pgjobs.E002"}
    assert any(fragment in m.msg for m in messages), [m.msg for m in messages]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--concurrency", "0"], "concurrency"),
        (["--concurrency", "-2"], "concurrency"),
        (["--batch-size", "0"], "batch-size"),
        (["--prefetch", "-1"], "prefetch"),
        (["--max-jobs", "0"], "max-jobs"),
        (["--poll-interval", "0"], "poll-interval"),
        (["--poll-interval", "nan"], "poll-interval"),
        (["--shutdown-grace", "-1"], "shutdown-grace"),
        (["--queue", ""], "queue must be"),
        (["--queue", "x'; DROP TABLE pgjobs_job; --"], "queue must be"),
    ],
)
def test_out_of_range_runjobs_options_raise_command_error(argv, fragment):
    with pytest.raises(CommandError, match=fragment):
        call_command("runjobs", *argv, "--burst")
    assert Job.objects.count() == 0
