"""Projects with ``USE_TZ = False``: naive datetimes in the project's ``TIME_ZONE`` everywhere.

The in-process tests override the settings and reconnect, so the connection's time zone and
the datetimes it returns follow Django's rules for such a project (the session time zone is
``TIME_ZONE``; timestamps read back naive). The worker is a real ``runjobs`` process started
with ``USE_TZ = False`` and the same zone. The zone is far from UTC, so a naive time taken as
UTC (or the reverse) is hours off.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from admin_data import seed
from django.db import connections
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from helpers import count, drain, wait_until

from django_pgjobs.models import DeadLetter, Job, QueueState
from django_pgjobs.states import View
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "America/Santiago"  # UTC-3 or -4: never equal to UTC, with daylight saving time
NAIVE_ENV = {"DJANGO_USE_TZ": "0", "DJANGO_TIME_ZONE": ZONE}
JOBS = reverse("admin:django_pgjobs_job_changelist")
DEAD = reverse("admin:django_pgjobs_deadletter_changelist")


@pytest.fixture
def naive_time():
    """``USE_TZ = False`` and TIME_ZONE = ZONE, on fresh connections (each sets its session
    time zone and its way of reading timestamps when it connects)."""
    connections.close_all()
    with override_settings(USE_TZ=False, TIME_ZONE=ZONE):
        yield
        connections.close_all()
    connections.close_all()


def stored_instant(other_connection, table: str, column: str, pk: int) -> datetime:
    """The instant PostgreSQL holds, read in UTC on a connection of its own."""
    other_connection.execute("SET TIME ZONE 'UTC'")
    row = other_connection.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk]).fetchone()
    return row[0]


def as_instant(naive: datetime) -> datetime:
    return naive.replace(tzinfo=zoneinfo.ZoneInfo(ZONE)).astimezone(dt_timezone.utc)


def test_enqueue_using_run_after_and_delay_take_naive_times_in_the_project_zone(
    naive_time, other_connection
):
    at = timezone.now() + timedelta(hours=2)
    assert timezone.is_naive(at)
    scheduled = demo.record.using(run_after=at).enqueue("at")
    delayed = demo.record.using(delay=3600).enqueue("delayed")
    aware_at = datetime.now(dt_timezone.utc) + timedelta(hours=3)
    aware = demo.record.using(run_after=aware_at).enqueue("aware")  # unambiguous: accepted
    now = demo.record.enqueue("now")
    assert timezone.is_naive(scheduled.created_at) and timezone.is_naive(now.run_after)
    assert stored_instant(other_connection, "pgjobs_job", "run_after", scheduled.pk) == as_instant(
        at
    )
    delayed_at = stored_instant(other_connection, "pgjobs_job", "run_after", delayed.pk)
    expected = as_instant(timezone.now() + timedelta(hours=1))
    assert abs((delayed_at - expected).total_seconds()) < 60
    assert stored_instant(other_connection, "pgjobs_job", "run_after", aware.pk) == aware_at
    assert Job.objects.get(pk=scheduled.pk).run_after == at  # read back naive, same wall time
    assert Job.objects.get(pk=now.pk).view == "due"
    assert Job.objects.get(pk=scheduled.pk).view == "scheduled"
    many = demo.record.using(run_after=at).enqueue_many([("a",), ("b",)])
    assert all(j.run_after == at for j in Job.objects.filter(pk__in=[j.pk for j in many]))


def test_every_admin_page_renders_rows_in_every_state_in_the_project_zone(naive_time, admin_client):
    rows = seed()
    pages = [
        reverse("admin:django_pgjobs_job_dashboard"),
        reverse("admin:django_pgjobs_deadletter_summary"),
        DEAD,
        DEAD + "?within=1h",
        reverse("admin:django_pgjobs_queuestate_changelist"),
        reverse("admin:django_pgjobs_worker_changelist"),
        JOBS,
    ]
    pages += [f"{JOBS}?view={view}" for view in [*View.values, "lease_expired"]]
    for row in [*Job.objects.all(), *DeadLetter.objects.all(), *QueueState.objects.all()]:
        name = row._meta.model_name
        pages.append(reverse(f"admin:django_pgjobs_{name}_change", args=[row.pk]))
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
    # the scheduled job's due time, shown in the project's zone (its abbreviation: -03 or -04)
    page = admin_client.get(
        reverse("admin:django_pgjobs_job_change", args=[rows["scheduled"].pk])
    ).content.decode()
    due = rows["scheduled"].run_after
    assert re.search(
        rf'title="{due:%Y-%m-%d %H:%M:%S} [^"]+">in 5 h 59 min</time></td><td>due<', page
    )


def test_admin_actions_with_naive_times(naive_time, admin_client):
    later = timezone.now() + timedelta(hours=3)
    scheduled = demo.record.using(run_after=later).enqueue("scheduled")
    retrying = demo.record.using(run_after=later).enqueue("retrying")
    Job.objects.filter(pk=retrying.pk).update(attempts=1)
    cancelled = demo.record.enqueue("cancelled")
    for pk, action in ((scheduled.pk, "run_now"), (retrying.pk, "retry_now")):
        response = admin_client.post(reverse("admin:django_pgjobs_job_act", args=[pk, action]))
        assert response.status_code == 302
        assert Job.objects.get(pk=pk).run_after <= timezone.now()
    admin_client.post(
        reverse("admin:django_pgjobs_job_act", args=[cancelled.pk, "cancel"]), {"confirmed": "yes"}
    )
    assert not Job.objects.filter(pk=cancelled.pk).exists()
    admin_client.post(reverse("admin:django_pgjobs_queuestate_pause", args=["default"]))
    assert QueueState.objects.get(name="default").paused
    admin_client.post(reverse("admin:django_pgjobs_queuestate_resume", args=["default"]))
    demo.always_fails.using(max_attempts=1).enqueue("dies")
    drain()
    letter = DeadLetter.objects.get()
    assert timezone.is_naive(letter.failed_at)
    # the error's time (stored with its offset) is shown in the project's zone, as the rows' are
    failed_at = datetime.fromisoformat(letter.errors[0]["at"])
    assert failed_at.utcoffset() is not None
    shown = failed_at.astimezone(zoneinfo.ZoneInfo(ZONE))
    page = admin_client.get(reverse("admin:django_pgjobs_deadletter_change", args=[letter.pk]))
    assert re.search(
        rf'title="{shown:%Y-%m-%d %H:%M:%S} [^"]+">[^<]+</time></td><td>attempt 1 failed',
        page.content.decode(),
    )
    response = admin_client.post(
        DEAD, {"action": "requeue", "_selected_action": [letter.pk], "index": 0}
    )
    assert response.status_code == 302
    requeued = Job.objects.get(name=letter.name)
    assert requeued.view == "due" and admin_client.get(JOBS).status_code == 200
    page = admin_client.get(reverse("admin:django_pgjobs_job_change", args=[requeued.pk]))
    assert page.status_code == 200
    # the list actions: run now (bulk) on a scheduled job, delete a dead letter for good
    again = demo.record.using(run_after=later).enqueue("bulk")
    response = admin_client.post(
        JOBS, {"action": "run_now", "_selected_action": [again.pk], "index": 0}
    )
    assert response.status_code == 302 and Job.objects.get(pk=again.pk).view == "due"
    drain()  # the requeued job fails again
    letters = [str(pk) for pk in DeadLetter.objects.values_list("pk", flat=True)]
    assert len(letters) == 1
    response = admin_client.post(
        DEAD, {"action": "delete", "_selected_action": letters, "index": 0, "post": "yes"}
    )
    assert response.status_code == 302 and not DeadLetter.objects.exists()


def test_runjobs_with_naive_times_runs_due_jobs_only_retries_and_the_admin_shows_them(
    naive_time, admin_client, start_worker, other_connection
):
    demo.record_times.enqueue("due")
    demo.record_times.enqueue("retried", fail_first=True)
    demo.always_fails.using(max_attempts=1).enqueue("dead")
    later = demo.record_times.using(run_after=timezone.now() + timedelta(minutes=30)).enqueue(
        "later"
    )
    worker = start_worker("--concurrency", "2", env=NAIVE_ENV)
    wait_until(lambda: Execution.objects.filter(label__startswith="retried").count() == 2, 30)
    wait_until(lambda: DeadLetter.objects.exists(), 30)
    # the worker's own rows (worker registry, statistics) render while it runs
    for url in (
        reverse("admin:django_pgjobs_job_dashboard"),
        reverse("admin:django_pgjobs_worker_changelist"),
        DEAD,
        reverse("admin:django_pgjobs_deadletter_change", args=[DeadLetter.objects.get().pk]),
        reverse("admin:django_pgjobs_job_change", args=[later.pk]),
    ):
        assert admin_client.get(url).status_code == 200, url
    worker.signal(15)
    assert worker.wait(30) == 0, worker.output()
    labels = sorted(Execution.objects.values_list("label", flat=True))
    assert labels == [
        "due waited>=0:True late>=0:True",
        "retried waited>=0:True late>=0:True",
        "retried waited>=0:True late>=0:True",
    ], worker.output()
    assert list(Job.objects.values_list("pk", flat=True)) == [later.pk]  # not due: not run
    assert count(other_connection, "SELECT count(*) FROM pgjobs_job WHERE run_after > now()") == 1
    (error,) = DeadLetter.objects.get().errors
    assert datetime.fromisoformat(error["at"]).utcoffset() is not None  # never ambiguous
    # the statistics the worker flushed land in this minute's bar of the chart, local time
    dashboard = admin_client.get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    minutes = re.findall(r"(\d\d:\d\d): (\d+) succeeded, (\d+) failed", dashboard)
    assert sum(int(ok) for _, ok, _ in minutes) == 2, minutes
    assert sum(int(failed) for _, _, failed in minutes) == 2, minutes
    recent = {f"{timezone.now() - timedelta(minutes=m):%H:%M}" for m in range(3)}
    assert {minute for minute, ok, _ in minutes if int(ok)} <= recent, minutes


def test_run_after_without_a_zone_is_still_refused_with_use_tz():
    with pytest.raises(ValueError, match="timezone-aware"):
        demo.record.using(run_after=datetime.now())


def test_runjobs_with_naive_times_writes_and_fires_schedules_in_the_project_zone(
    naive_time, start_worker, other_connection
):
    """A project with ``USE_TZ = False`` and a recurring job: the worker's scheduler compared the
    naive times of its clock and rows with the aware fire times of cron and died at start."""
    from django_pgjobs.models import Schedule, ScheduleFire

    due = Schedule.objects.create(
        name="every minute, naive",
        job_name=demo.record.name,
        cron="* * * * *",
        args=["naive fire"],
        next_fire_at=timezone.now().replace(second=0, microsecond=0),  # on time, or caught up
    )
    env = {**NAIVE_ENV, "PGJOBS_TEST_JOB_MODULES": "testproject.demo.recurring"}
    worker = start_worker(env=env)
    fired = Execution.objects.filter(label="naive fire")
    wait_until(lambda: worker.popen.poll() is not None or fired.exists(), 30)
    assert worker.popen.poll() is None, worker.output()  # it died at start
    # the first fire: a run that crosses a minute boundary also fires the next minute
    fire = ScheduleFire.objects.filter(schedule=due).order_by("fire_time").first()
    assert stored_instant(other_connection, "pgjobs_schedule_fire", "fire_time", fire.pk) == (
        as_instant(due.next_fire_at)
    )
    daily = Schedule.objects.get(name__endswith="daily_in_paris")  # declared: Paris midnight
    paris = stored_instant(other_connection, "pgjobs_schedule", "next_fire_at", daily.pk)
    local = paris.astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (0, 0) and paris > datetime.now(dt_timezone.utc)
    minute = Schedule.objects.get(name__endswith="recurring.every_minute")  # the project's zone
    # the next minute, or the one just passed if the test crossed a minute since: never hours off
    assert timezone.is_naive(minute.next_fire_at) and minute.next_fire_at.second == 0
    assert abs(minute.next_fire_at - timezone.now()) <= timedelta(minutes=1)
    worker.signal(15)
    assert worker.wait(30) == 0, worker.output()


def test_an_operator_adds_and_resumes_a_schedule_with_naive_times(naive_time, admin_client):
    from django_pgjobs.models import Schedule

    data = {"name": "nightly", "job_name": demo.record.name, "cron": "30 2 * * *"}
    data.update({"time_zone": "", "args": '["n"]', "kwargs": "{}", "catch_up": "1"})
    response = admin_client.post("/admin/django_pgjobs/schedule/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Schedule.objects.get(name="nightly")
    assert timezone.is_naive(row.next_fire_at)
    assert (row.next_fire_at.hour, row.next_fire_at.minute) == (2, 30)  # in the project's zone
    Schedule.objects.filter(pk=row.pk).update(paused=True)
    response = admin_client.post(
        "/admin/django_pgjobs/schedule/", {"action": "resume", "_selected_action": [row.pk]}
    )
    assert response.status_code == 302
    assert admin_client.get(f"/admin/django_pgjobs/schedule/{row.pk}/change/").status_code == 200
    assert admin_client.get("/admin/django_pgjobs/schedule/").status_code == 200


def test_an_every_half_hour_schedule_runs_in_both_passes_of_the_repeated_hour(
    naive_time, other_connection
):
    """Clocks go back in Santiago on 5 April 2026 (00:00 -03 -> 23:00 -04): the hour from 23:00
    happens twice. The scheduler's clock and rows are read naive; each fire time still runs once,
    30 real minutes apart, in both passes."""
    from test_scheduler import Clock, minutes, run_until, schedule, scheduler

    first = datetime(2026, 4, 5, 1, 50, tzinfo=dt_timezone.utc)  # 22:50 in Santiago
    row = schedule("*/30 * * * *", first)  # in the project's zone
    clock = Clock(first)
    start = first + timedelta(minutes=10)
    run_until(scheduler(clock), clock, start + timedelta(hours=3))
    other_connection.execute("SET TIME ZONE 'UTC'")
    fired = other_connection.execute(
        "SELECT fire_time FROM pgjobs_schedule_fire WHERE schedule_id = %s ORDER BY 1", [row.pk]
    ).fetchall()
    assert [moment for (moment,) in fired] == minutes(start, 7, 30)
