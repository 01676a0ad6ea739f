"""docs/howto/recurring.md: recurring jobs declared in code.

Not in PGJOBS["JOB_MODULES"] (a worker of any other test would write and fire them):
tests/test_recurring_howto.py declares them for its own tests and its workers
(PGJOBS_TEST_JOB_MODULES).
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from django_pgjobs import Cron, job
from testproject.demo.jobs import _record as record
from testproject.demo.models import Execution

# -- Declare a recurring job -----------------------------------------------------------------


@job(cron="0 3 * * *")  # every day at 03:00, in settings.TIME_ZONE
def purge_old_executions() -> None:
    Execution.objects.filter(at__lt=timezone.now() - timedelta(days=30)).delete()


@job(
    queue="reports",
    cron=Cron("30 8 * * mon-fri", args=("sales",), time_zone="Europe/Paris", catch_up=0),
)
def send_morning_report(team: str) -> None:
    record(f"morning report for {team}")


@job(cron="@hourly")
def refresh_exchange_rates() -> None:
    record("exchange rates refreshed")
