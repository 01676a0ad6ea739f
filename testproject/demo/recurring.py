"""Recurring jobs declared in code, for tests/test_schedules*.py. Not in PGJOBS["JOB_MODULES"]:
only the worker processes that ask (PGJOBS_TEST_JOB_MODULES) and the tests that import it declare
them, so no other test's worker syncs or fires them."""

from __future__ import annotations

from django_pgjobs import Cron, job

from .jobs import _record


@job(cron="* * * * *")
def every_minute() -> None:
    _record("every minute")


@job(cron=Cron("@daily", args=("daily in Paris",), time_zone="Europe/Paris", catch_up=0))
def daily_in_paris(label: str) -> None:
    _record(label)
