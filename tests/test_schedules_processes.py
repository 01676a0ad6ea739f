"""Recurring jobs with real ``runjobs`` processes: three workers fire each minute once; a worker
restarted after missing fire times applies each schedule's misfire policy.

The three-worker test waits for one real minute boundary (up to 60 s, plus one look of each
worker: about 70 s, mostly idle); tests/test_scheduler.py drives the same unit through 120 fire
times with three schedulers at once in seconds, and across daylight-saving changes."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.utils import timezone
from helpers import schedule_looks as looks
from helpers import wait_until

from django_pgjobs import schedules
from django_pgjobs.models import Job, Schedule, ScheduleFire
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.timezone.utc
DECLARED = {"PGJOBS_TEST_JOB_MODULES": "testproject.demo.recurring"}


@pytest.mark.long  # crosses a real minute boundary: up to about 70 s, mostly idle
def test_three_workers_fire_a_once_a_minute_schedule_once_per_minute(start_worker):
    started = timezone.now()
    workers = [start_worker("-v", "2", env=DECLARED) for _ in range(3)]
    name = "testproject.demo.recurring.every_minute"
    wait_until(lambda: Schedule.objects.filter(name=name).exists())  # the first one synced it
    synced_by = timezone.now()  # its first fire time is the first minute after the sync
    row = Schedule.objects.get(name=name)

    wait_until(lambda: Execution.objects.filter(label="every minute").exists(), timeout=90)
    # the first fire: the first minute after the first worker synced the row (read from the
    # fires, not from the row: on a loaded machine the row was read after that fire had moved
    # it on; and a worker can take seconds to start, so not from the test's start either)
    earliest = ScheduleFire.objects.filter(schedule=row).order_by("fire_time").first()
    first, fired_at = earliest.fire_time, earliest.fired_at
    assert first.second == 0 and started - dt.timedelta(seconds=1) < first
    assert first <= synced_by + dt.timedelta(seconds=61)
    # every worker has looked again since: a second fire of that minute would be there by now
    wait_until(lambda: all(any(t > fired_at for t, *_ in looks(w)) for w in workers), timeout=30)

    fires = list(ScheduleFire.objects.filter(schedule=row).order_by("fire_time"))
    times = [fire.fire_time for fire in fires]
    assert times == [first + dt.timedelta(minutes=i) for i in range(len(times))]
    wait_until(lambda: not Job.objects.filter(name=demo.record.name).exists())
    assert Execution.objects.filter(label="every minute").count() == len(fires)
    assert sum(fired for w in workers for _, fired, _ in looks(w)) == len(fires)
    assert Schedule.objects.filter(source="code").count() == 2  # every_minute, daily_in_paris


def test_a_worker_restarted_after_missing_fire_times_applies_the_misfire_policy(start_worker):
    """Yearly schedules (1 January, 00:00 UTC) left as a worker stopped since late 2022 would
    have left them: on restart, catch_up=0 skips 2023..2026, catch_up=1 runs 2026 once,
    catch_up=2 runs 2025 and 2026; each then waits for 2027."""
    rows = {}
    for catch_up in (0, 1, 2):
        rows[catch_up] = Schedule.objects.create(
            name=f"yearly, catch up {catch_up}",
            job_name=demo.record.name,
            cron="@yearly",
            time_zone="UTC",
            args=[f"catch up {catch_up}"],
            catch_up=catch_up,
            next_fire_at=schedules.first_fire("@yearly", "UTC"),
        )
    worker = start_worker("-v", "2")
    wait_until(lambda: looks(worker))
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert not ScheduleFire.objects.exists()

    # the span no worker ran: since the end of 2022
    Schedule.objects.update(next_fire_at=dt.datetime(2023, 1, 1, tzinfo=UTC))
    worker = start_worker("-v", "2")
    next_year = dt.datetime(timezone.now().year + 1, 1, 1, tzinfo=UTC)
    wait_until(lambda: all(r.next_fire_at == next_year for r in Schedule.objects.all()))
    wait_until(lambda: not Job.objects.exists())

    this_year = next_year.year - 1

    def fired(catch_up: int) -> list[int]:
        return [
            t.year
            for t in ScheduleFire.objects.filter(schedule=rows[catch_up])
            .order_by("fire_time")
            .values_list("fire_time", flat=True)
        ]

    assert fired(0) == []
    assert fired(1) == [this_year]
    assert fired(2) == [this_year - 1, this_year]
    for catch_up in (0, 1, 2):
        assert Execution.objects.filter(label=f"catch up {catch_up}").count() == catch_up
    missed = this_year - 2023 + 1
    assert f"'yearly, catch up 0': {missed} fire time(s) missed" in worker.output()
