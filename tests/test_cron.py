"""Cron expressions and plans (django_pgjobs/cron.py) and ``@job(cron=...)``: pure parts, no
database."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from django_pgjobs import Cron, registry
from django_pgjobs.cron import fields_of, next_after, plan
from django_pgjobs.payload import ArgumentsNotJSON

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 24, 8, 20, 30, tzinfo=UTC)  # a Tuesday


@pytest.mark.parametrize(
    ("alias", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_aliases_are_five_fields(alias, fields):
    assert fields_of(alias) == fields


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("* * * *", "five fields"),
        ("0 * * * * *", "five fields"),  # no seconds field
        ("@reboot", "unknown cron alias"),
        ("60 * * * *", "Bad minute"),
        ("* * 31 2 *", "cron"),
        (5, "must be a string"),
    ],
)
def test_what_is_not_a_five_field_expression_is_refused(expression, error):
    with pytest.raises(ValueError, match=error):
        fields_of(expression)


def test_the_next_fire_time_is_read_in_the_schedule_time_zone():
    assert next_after("30 8 * * mon-fri", "Europe/Paris", NOW) == dt.datetime(
        2026, 11, 25, 7, 30, tzinfo=UTC
    )
    assert next_after("@hourly", "UTC", NOW) == dt.datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def test_a_fire_time_within_the_grace_is_on_time_and_older_ones_follow_catch_up():
    since = NOW - dt.timedelta(minutes=10)
    on_time = plan("* * * * *", "UTC", since, NOW, catch_up=0, grace_seconds=60)
    assert on_time.fire == [dt.datetime(2026, 11, 24, 8, 20, tzinfo=UTC)]
    assert on_time.skipped == 9  # 08:11 .. 08:19
    caught = plan("* * * * *", "UTC", since, NOW, catch_up=2, grace_seconds=60)
    assert [t.minute for t in caught.fire] == [18, 19, 20] and caught.skipped == 7
    assert caught.next_fire == dt.datetime(2026, 11, 24, 8, 21, tzinfo=UTC)


def test_a_schedule_missed_for_years_plans_without_walking_every_minute():
    since = dt.datetime(2020, 1, 1, tzinfo=UTC)
    planned = plan("* * * * *", "UTC", since, NOW, catch_up=1, grace_seconds=0)
    assert planned.fire == [dt.datetime(2026, 11, 24, 8, 20, tzinfo=UTC)]
    assert planned.skipped == 10_000  # counted up to 10,000 for the log


def test_cron_checks_what_it_is_given():
    with pytest.raises(ValueError, match="unknown time zone"):
        Cron("@daily", time_zone="Mars/Olympus")
    with pytest.raises(ValueError, match="catch_up must be between"):
        Cron("@daily", catch_up=-1)
    with pytest.raises(ValueError, match="catch_up must be an int"):
        Cron("@daily", catch_up=True)
    with pytest.raises(ValueError, match="args must be a tuple"):
        Cron("@daily", args="abc")
    with pytest.raises(ValueError, match="never fires: no date matches it"):
        Cron("0 0 */29 2 1#5")  # accepted by the parser; its first fire time crashed workers
    assert Cron("@daily", args=[1]).args == (1,)


@pytest.mark.parametrize(
    "args, kwargs, said",
    [
        ((), {"older_than": dt.timedelta(days=30)}, "kwargs['older_than'] is a datetime.timedelta"),
        ((float("nan"),), {}, "args[0] is nan"),
        (("a\x00b",), {}, "args[0] contains a NUL character"),
    ],
)
def test_cron_refuses_arguments_that_are_not_json_when_declared(args, kwargs, said):
    """Accepted, they stopped every worker at its start (their schedule row is written then)."""
    with pytest.raises(ArgumentsNotJSON, match=re.escape(f"Cron('0 3 * * *'): {said}")):
        Cron("0 3 * * *", args=args, kwargs=kwargs)


def test_job_cron_is_checked_when_the_module_is_imported():
    def report(team: str) -> None: ...

    with pytest.raises(ValueError, match="five fields"):
        registry.JobDefinition(func=report, name="tests.report", cron="every day")
    with pytest.raises(TypeError):
        registry.JobDefinition(func=report, name="tests.report", cron=Cron("@daily"))
    defined = registry.JobDefinition(
        func=report, name="tests.report", cron=Cron("@daily", args=("sales",))
    )
    assert defined.cron == Cron("@daily", args=("sales",))

    def cleanup() -> None: ...

    hourly = registry.JobDefinition(func=cleanup, name="tests.cleanup", cron="@hourly")
    assert hourly.cron == Cron("@hourly")
