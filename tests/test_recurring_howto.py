"""docs/howto/recurring.md: the recurring jobs of testproject/handlers/recurring.py written as
rows by a real worker, run now from the admin and run by that worker; and the page's testing
section, the first test here."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from helpers import registered_for_the_test, unregister, wait_until

from django_pgjobs.models import Schedule, ScheduleFire
from testproject.demo.models import Execution
from testproject.handlers.recurring import (
    purge_old_executions,
    refresh_exchange_rates,
    send_morning_report,
)

pytestmark = pytest.mark.django_db(transaction=True)
HOWTO = (purge_old_executions, send_morning_report, refresh_exchange_rates)
unregister(*HOWTO)  # declared only by the tests that ask (helpers.registered_for_the_test)


# tests/test_recurring_howto.py
def test_the_morning_report_runs_on_weekday_mornings_in_paris():
    schedule = send_morning_report.cron
    assert (schedule.expression, schedule.time_zone) == ("30 8 * * mon-fri", "Europe/Paris")
    assert schedule.args == ("sales",) and schedule.catch_up == 0
    send_morning_report(*schedule.args)  # the job's code, called directly
    assert Execution.objects.filter(label="morning report for sales").exists()


def test_a_worker_writes_the_declared_schedules_and_runs_one_now(start_worker, admin_client):
    worker = start_worker(env={"PGJOBS_TEST_JOB_MODULES": "testproject.handlers.recurring"})
    wait_until(lambda: Schedule.objects.count() == 3)
    rows = {row.name: row for row in Schedule.objects.all()}

    report = rows[send_morning_report.name]
    assert (report.cron, report.time_zone, report.args, report.catch_up, report.source) == (
        "30 8 * * mon-fri",
        "Europe/Paris",
        ["sales"],
        0,
        "code",
    )
    local = report.next_fire_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (8, 30) and local.weekday() < 5
    purge = rows[purge_old_executions.name]
    assert purge.next_fire_at.astimezone(dt.timezone.utc).hour == 3  # TIME_ZONE = "UTC"
    assert rows[refresh_exchange_rates.name].next_fire_at.minute == 0

    with registered_for_the_test(*HOWTO):  # the web process knows the jobs too
        admin_client.post(
            "/admin/django_pgjobs/schedule/",
            {"action": "run_now", "_selected_action": [report.pk]},
        )
    wait_until(lambda: Execution.objects.filter(label="morning report for sales").exists())
    assert ScheduleFire.objects.get().job_id == Schedule.objects.get(pk=report.pk).last_job_id
    del worker
