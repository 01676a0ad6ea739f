"""The scheduler unit (django_pgjobs/worker/scheduler.py) driven by an injected clock against
the test database: many fire times in seconds, several schedulers at once on connections of
their own, the misfire policy, time zones across daylight-saving changes. No ``Worker`` is built;
tests/test_schedules_processes.py runs real workers."""

from __future__ import annotations

import datetime as dt
import threading
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, connections
from helpers import registered_for_the_test, wait_until

from django_pgjobs import job, operations, registry, schedules
from django_pgjobs.models import FlowKey, Job, Schedule, ScheduleFire
from django_pgjobs.testing import run_jobs
from django_pgjobs.worker.faults import DispatcherDatabase
from django_pgjobs.worker.scheduler import Scheduler, SchedulerConfig, SchedulerCounts
from django_pgjobs.worker.stopping import StopState
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
RECORD = demo.record.name


class Clock:
    def __init__(self, start: dt.datetime) -> None:
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now


def scheduler(clock: Clock, alias: str = "default", **config) -> Scheduler:
    return Scheduler(
        DispatcherDatabase(alias, StopState(grace=0)), SchedulerConfig(**config), clock
    )


def schedule(cron: str, start: dt.datetime, **fields) -> Schedule:
    """A schedule added as an operator does, its first fire time computed at ``start``."""
    fields.setdefault("args", ["tick"])
    fields.setdefault("job_name", RECORD)
    row = Schedule(name=fields.pop("name", cron), cron=cron, **fields)
    row.next_fire_at = schedules.first_fire(cron, row.time_zone, start)
    row.save()
    return row


def fire_times(row: Schedule) -> list[dt.datetime]:
    return list(
        ScheduleFire.objects.filter(schedule=row)
        .order_by("fire_time")
        .values_list("fire_time", flat=True)
    )


def minutes(start: dt.datetime, count: int, step: int = 1) -> list[dt.datetime]:
    return [start + dt.timedelta(minutes=step * i) for i in range(count)]


def test_each_fire_time_is_enqueued_once_by_three_schedulers_at_once():
    """Three schedulers, each on a thread and connection of its own, look at the same instants
    (as workers whose timers all wake at the fire time do) for 120 fire times: each fires once."""
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start)
    barrier = threading.Barrier(3)
    results: list[SchedulerCounts] = []
    errors: list[BaseException] = []

    def worker() -> None:
        clock = Clock(start)
        unit = scheduler(clock)
        try:
            for step in range(1, 121):
                clock.now = start + dt.timedelta(minutes=step, seconds=-30)  # hh:mm:00
                barrier.wait(timeout=30)
                results.append(unit.run_once())
        except BaseException as error:  # reported by the test
            errors.append(error)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors
    expected = minutes(dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC), 120)
    assert fire_times(row) == expected
    assert Job.objects.filter(name=RECORD).count() == 120
    assert sum(r.fired for r in results) == 120
    row.refresh_from_db()
    assert row.next_fire_at == expected[-1] + dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("catch_up", "fired"),
    [
        (0, []),
        (1, [dt.datetime(2026, 1, 5, 12, 0, tzinfo=UTC)]),
        (3, minutes(dt.datetime(2026, 1, 5, 10, 0, tzinfo=UTC), 3, 60)),
    ],
)
def test_missed_fire_times_follow_the_catch_up_policy(catch_up, fired):
    """No worker ran from 08:30 to 12:20 (an hourly schedule missed 09:00 .. 12:00): catch_up=0
    skips them, 1 (the default) runs 12:00 once, 3 runs 10:00, 11:00 and 12:00; the next fire
    time is 13:00 either way."""
    row = schedule("@hourly", dt.datetime(2026, 1, 5, 8, 30, tzinfo=UTC), catch_up=catch_up)
    counts = scheduler(Clock(dt.datetime(2026, 1, 5, 12, 20, tzinfo=UTC))).run_once()

    assert fire_times(row) == fired
    assert counts.fired == len(fired) and counts.skipped == 4 - len(fired)
    row.refresh_from_db()
    assert row.next_fire_at == dt.datetime(2026, 1, 5, 13, 0, tzinfo=UTC)


def run_until(unit: Scheduler, clock: Clock, end: dt.datetime) -> None:
    """Look, then move the clock to the next fire time the look saw, until ``end``."""
    while True:
        unit.run_once()
        if unit.next_wake is None or unit.next_wake > end:
            return
        clock.now = unit.next_wake


def paris(*fields: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*fields, tzinfo=PARIS, fold=fold).astimezone(UTC)


def test_a_daily_schedule_in_paris_across_both_daylight_saving_changes():
    """02:30 every day, Paris time: on 29 March 2026 02:30 does not exist (02:00 -> 03:00), so it
    fires at 03:00; on 25 October 02:30 happens twice (03:00 -> 02:00), it fires once, the first
    time. The other days: 02:30 local, whatever the offset."""
    for first, last, expected in [
        (
            dt.datetime(2026, 3, 27, 12, tzinfo=UTC),
            dt.datetime(2026, 3, 31, tzinfo=UTC),
            [paris(2026, 3, 28, 2, 30), paris(2026, 3, 29, 3, 0), paris(2026, 3, 30, 2, 30)],
        ),
        (
            dt.datetime(2026, 10, 23, 12, tzinfo=UTC),
            dt.datetime(2026, 10, 27, tzinfo=UTC),
            [paris(2026, 10, 24, 2, 30), paris(2026, 10, 25, 2, 30), paris(2026, 10, 26, 2, 30)],
        ),
    ]:
        row = schedule("30 2 * * *", first, name=f"paris {first:%m}", time_zone="Europe/Paris")
        clock = Clock(first)
        run_until(scheduler(clock), clock, last)
        assert fire_times(row) == expected
    assert paris(2026, 3, 29, 3, 0) == dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert paris(2026, 10, 25, 2, 30) == dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def test_an_every_half_hour_schedule_in_paris_follows_real_time_across_the_changes():
    """Every 30 minutes, Paris time: none in the hour that does not exist, both passes of the
    hour that happens twice; always 30 real minutes apart."""
    spring = dt.datetime(2026, 3, 28, 22, 50, tzinfo=UTC)  # 23:50 Paris
    autumn = dt.datetime(2026, 10, 24, 21, 50, tzinfo=UTC)  # 23:50 Paris
    for first, hours in ((spring, 3), (autumn, 5)):
        row = schedule(
            "*/30 * * * *", first, name=f"half hour {first:%m}", time_zone="Europe/Paris"
        )
        clock = Clock(first)
        midnight = first + dt.timedelta(minutes=10)
        run_until(scheduler(clock), clock, midnight + dt.timedelta(hours=hours))
        assert fire_times(row) == minutes(midnight, 2 * hours + 1, 30)
    assert [t.astimezone(PARIS).strftime("%H:%M%z") for t in fire_times(row)][4:8] == [
        "02:00+0200",
        "02:30+0200",
        "02:00+0100",
        "02:30+0100",
    ]


def test_a_paused_schedule_fires_nothing_and_resumes_from_the_next_fire_time():
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start, paused=True)
    clock = Clock(start + dt.timedelta(minutes=5))
    assert scheduler(clock).run_once() == SchedulerCounts()
    assert fire_times(row) == []

    # a pause taken between a worker's look and its fire: the fire statement checks again
    unit = scheduler(clock)
    Schedule.objects.filter(pk=row.pk).update(paused=False)
    found = schedules.due(connections["default"], clock.now)
    (due,) = found.schedules
    Schedule.objects.filter(pk=row.pk).update(paused=True)
    assert schedules.fire(connections["default"], due, demo.record, clock.now, None) is None
    assert fire_times(row) == []
    del unit


def test_a_schedule_changed_after_a_look_is_not_fired_with_the_old_definition():
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start)
    now = start + dt.timedelta(seconds=30)
    (due,) = schedules.due(connections["default"], now).schedules
    Schedule.objects.filter(pk=row.pk).update(cron="0 0 * * *", changed_at=now)
    assert schedules.fire(connections["default"], due, demo.record, now, None) is None


def test_an_edit_committed_while_a_fire_runs_keeps_the_new_definitions_next_fire_time():
    """An operator's edit (a new cron and its next fire time) holds the row when a worker fires
    the old definition's due time: the fire waits for the edit, then fires nothing, and the new
    next fire time stays (the old definition's later one must not overwrite it)."""
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("0 * * * *", start)  # hourly: due at 10:00
    now = dt.datetime(2026, 1, 5, 10, 0, 10, tzinfo=UTC)
    (due,) = schedules.due(connections["default"], now).schedules
    edited = dt.datetime(2026, 1, 5, 10, 1, tzinfo=UTC)
    operator = connections.create_connection("default")
    operator.set_autocommit(False)
    results: list = []

    def fire() -> None:
        try:
            eleven = dt.datetime(2026, 1, 5, 11, 0, tzinfo=UTC)
            fire_time = due["next_fire_at"]
            results.append(
                schedules.fire(connections["default"], due, demo.record, fire_time, eleven)
            )
        except BaseException as error:  # reported by the test
            results.append(error)
        finally:
            connections.close_all()

    try:
        with operator.cursor() as cursor:
            cursor.execute(
                "UPDATE pgjobs_schedule SET cron = '* * * * *', next_fire_at = %s,"
                " changed_at = now() WHERE id = %s",
                [edited, row.pk],
            )
        thread = threading.Thread(target=fire)
        thread.start()
        with connections["default"].cursor() as cursor:

            def waiting() -> bool:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%pgjobs_schedule_fire%%'"
                )
                return cursor.fetchone()[0] == 1

            wait_until(waiting, timeout=30, interval=0.02)
        operator.commit()
        thread.join(timeout=30)
    finally:
        operator.close()
    row.refresh_from_db()
    assert (row.cron, row.next_fire_at) == ("* * * * *", edited)
    assert results == [None] and not fire_times(row)


def test_a_fire_time_already_passed_is_not_fired_again_after_its_row_is_pruned():
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start)
    clock = Clock(start + dt.timedelta(seconds=30))
    (stale,) = schedules.due(connections["default"], clock.now).schedules
    assert scheduler(clock).run_once().fired == 1
    ScheduleFire.objects.all().delete()  # pruned

    fire_time = stale["next_fire_at"]
    assert schedules.fire(connections["default"], stale, demo.record, fire_time, None) is None
    assert Job.objects.count() == 1
    del row


def test_the_schedules_declared_in_code_are_written_as_rows_once(declared):
    unit = scheduler(Clock(dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)))
    assert unit.run_once().synced == 2
    rows = {row.name: row for row in Schedule.objects.all()}
    minute = rows[declared.every_minute.name]
    paris_row = rows[declared.daily_in_paris.name]
    assert (minute.cron, minute.source, minute.catch_up, minute.time_zone) == (
        "* * * * *",
        "code",
        1,
        "",
    )
    assert (paris_row.cron, paris_row.args, paris_row.time_zone, paris_row.catch_up) == (
        "@daily",
        ["daily in Paris"],
        "Europe/Paris",
        0,
    )
    # another worker starting: nothing to write; an operator's pause is kept
    Schedule.objects.filter(name=minute.name).update(paused=True)
    assert scheduler(Clock(dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC))).run_once().synced == 0
    assert Schedule.objects.get(name=minute.name).paused


def test_a_declared_schedule_changed_in_a_deploy_keeps_the_fire_time_the_deploy_missed(declared):
    """Workers down for a deploy that changes a declared schedule's arguments: the fire time
    missed meanwhile keep their misfire policy (catch_up=1: the last runs), as they would
    unchanged.
    The row's next fire time was recomputed from the present, and none of them ran.
    A new cron or time zone has no such time to keep: its next fire time starts afresh."""
    minute = declared.every_minute.name
    scheduler(Clock(dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC))).run_once()
    Schedule.objects.filter(name=minute).update(args=["the release before"])
    after_deploy = scheduler(Clock(dt.datetime(2026, 1, 5, 9, 5, 30, tzinfo=UTC))).run_once()
    row = Schedule.objects.get(name=minute)
    # 09:05 is on time (within the grace); of the four missed, the last runs (catch_up=1)
    assert (after_deploy.synced, after_deploy.fired, after_deploy.skipped) == (1, 2, 3)
    assert fire_times(row) == minutes(dt.datetime(2026, 1, 5, 9, 4, tzinfo=UTC), 2)
    assert row.args == list(declared.every_minute.cron.args)

    Schedule.objects.filter(name=minute).update(cron="@hourly")
    clock = Clock(dt.datetime(2026, 1, 5, 9, 20, 30, tzinfo=UTC))
    assert scheduler(clock).run_once().fired == 0  # 09:06-09:20 were not its times
    assert Schedule.objects.get(name=minute).next_fire_at == dt.datetime(
        2026, 1, 5, 9, 21, tzinfo=UTC
    )


def test_a_schedule_added_in_the_admin_is_not_overwritten_by_a_declared_one(declared, caplog):
    Schedule.objects.create(
        name=declared.every_minute.name, job_name=RECORD, cron="@hourly", args=["mine"]
    )
    assert scheduler(Clock(dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC))).run_once().synced == 1
    row = Schedule.objects.get(name=declared.every_minute.name)
    assert (row.cron, row.source, row.args) == ("@hourly", "admin", ["mine"])
    assert (
        f"the schedule declared by @job(cron=...) of {row.name} is not used: a schedule of that "
        "name added in the admin is" in caplog.text
    )


def test_due_schedules_whose_job_is_unknown_are_kept_and_do_not_fill_the_looks():
    """Limit-many schedules naming jobs this worker does not know (renamed in a release) are
    left to the workers that know them: the good one behind them fires, no look is repeated."""
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    gone = [schedule("* * * * *", start - dt.timedelta(days=1), name=f"gone {n}") for n in (1, 2)]
    Schedule.objects.filter(name__startswith="gone").update(job_name="myapp.jobs.removed")
    good = schedule("* * * * *", start, name="good")
    unit = scheduler(Clock(start + dt.timedelta(minutes=1)), limit=2)
    assert unit.run_once().fired == 1 and unit.wait_seconds() > 0
    assert fire_times(good) == [dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC)]
    for row in gone:
        assert Schedule.objects.filter(pk=row.pk).exists() and fire_times(row) == []


def test_a_schedule_declared_in_code_whose_job_lost_its_cron_fires_nothing():
    """The next release keeps the job but removes cron= from its @job: its row is not fired
    (pgjobs.W003 and the admin say it), and does not fill the looks."""
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start, name=RECORD, source="code")  # demo.record: no cron=
    other = schedule("* * * * *", start, name="added in the admin")
    unit = scheduler(Clock(start + dt.timedelta(minutes=5)), limit=1)
    assert unit.run_once().fired == 2  # 09:04 (catch_up) and 09:05
    assert unit.run_once().fired == 0 and unit.wait_seconds() > 0
    assert fire_times(row) == [] and len(fire_times(other)) == 2


def _overlap() -> None:
    pass


def test_a_recurring_job_with_a_unique_key_is_not_enqueued_while_one_is_in_flight():
    """An every-minute job meant never to overlap (its unique_key): while its job waits or
    runs, the following fire times are spent with no job (recorded as skipped), not piled up."""
    declared = job(name="tests.no_overlap", unique_key=lambda: "only-one")(_overlap)
    registry._REGISTRY.pop(declared.name, None)
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    with registered_for_the_test(declared):
        row = schedule("* * * * *", start, job_name=declared.name, args=[])
        clock = Clock(start)
        unit = scheduler(clock)
        counts = []
        for minute in range(1, 4):  # no worker runs the jobs: the first one still waits
            clock.now = start + dt.timedelta(minutes=minute, seconds=-30)
            counts.append(unit.run_once())
        assert [(c.fired, c.held) for c in counts] == [(1, 0), (0, 1), (0, 1)]
        (waiting,) = Job.objects.filter(name=declared.name)
        assert waiting.unique_key == "only-one"
        assert len(fire_times(row)) == 3
        assert ScheduleFire.objects.filter(job_id__isnull=True).count() == 2
        assert Schedule.objects.get(pk=row.pk).last_job_id == waiting.id  # the one in flight
        Job.objects.all().delete()  # it ran: the next fire time enqueues again
        clock.now += dt.timedelta(minutes=1)
        assert unit.run_once().fired == 1


def test_a_schedule_whose_arguments_no_longer_fit_its_job_is_not_fired(caplog):
    """The job's signature changed in a release: each job would be dead-lettered at once
    (BadArguments). The fire time is passed over, logged once; the schedule fires again once
    its arguments are fixed."""
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    row = schedule("* * * * *", start, args=["a", "b", "c", "d"], kwargs={"gone": 1})
    clock = Clock(start + dt.timedelta(minutes=1))
    unit = scheduler(clock)
    counts = unit.run_once()
    assert (counts.fired, counts.invalid) == (0, 1)
    clock.now += dt.timedelta(minutes=1)
    assert (unit.run_once().invalid, Job.objects.count()) == (1, 0)
    assert caplog.text.count("has arguments that do not fit its job") == 1
    row.refresh_from_db()
    assert row.next_fire_at == dt.datetime(2026, 1, 5, 9, 3, tzinfo=UTC)
    Schedule.objects.filter(pk=row.pk).update(args=["fixed"], kwargs={})
    clock.now += dt.timedelta(minutes=1)
    assert unit.run_once().fired == 1


def _order_report(order: dict) -> None:
    pass


def test_a_schedule_whose_unique_key_function_raises_is_not_fired(caplog):
    """The job's own unique_key function fails on the schedule's arguments (a KeyError, as
    ``order["id"]`` on an admin schedule's ``{"number": 5}``): that schedule is passed over,
    logged once, and the others fire. It once stopped the worker, and every worker after it."""
    declared = job(name="tests.order_report", unique_key=lambda order: f"o{order['id']}")(
        _order_report
    )
    registry._REGISTRY.pop(declared.name, None)
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    with registered_for_the_test(declared):
        schedule("* * * * *", start, name="bad", job_name=declared.name, args=[{"number": 5}])
        schedule("* * * * *", start, name="good", job_name=declared.name, args=[{"id": 5}])
        clock = Clock(start + dt.timedelta(minutes=1))
        counts = scheduler(clock).run_once()
        assert (counts.fired, counts.invalid) == (1, 1)
        assert list(Job.objects.values_list("unique_key", flat=True)) == ["o5"]
        assert "its unique_key function raised KeyError: 'id'" in caplog.text
        assert schedules.unfit(declared, [{"number": 5}], {}) == (
            "its unique_key function raised KeyError: 'id'"
        )


def _nightly() -> None:
    pass


def test_a_code_row_written_back_by_an_older_release_is_warned_about_by_a_newer_worker(caplog):
    """Rolling deploy: a worker of the old release (re)starting after the new release's first
    writes the old cron back; the new release's workers, which wrote theirs at start, say so
    (once) when they fire that row. The clock of the scheduler (a test's) also plans the
    declared schedules' first fire times."""
    new = job(name="tests.nightly", cron="* * * * *")(_nightly)
    old = job(name="tests.nightly", cron="*/2 * * * *")(_nightly)
    registry._REGISTRY.pop(new.name, None)
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    clock = Clock(start)
    with registered_for_the_test(new):
        newer = scheduler(clock)
        assert newer.run_once().synced == 1
    row = Schedule.objects.get(name=new.name)
    assert row.next_fire_at == dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC)  # the test's clock
    with registered_for_the_test(old):
        assert scheduler(clock).run_once().synced == 1  # the old release restarts
    with registered_for_the_test(new):
        for minute in (2, 4):
            clock.now = start + dt.timedelta(minutes=minute)
            assert newer.run_once().fired == 1
    assert caplog.text.count("differs from this worker's @job(cron=...) ('* * * * *')") == 1


def test_missed_fire_times_past_the_count_limit_are_logged_as_at_least(caplog):
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    schedule("* * * * *", start, catch_up=0)
    unit = scheduler(Clock(start + dt.timedelta(days=30)))  # 43,200 minutes missed
    assert unit.run_once().skipped == 10_000
    assert "at least 10000 fire time(s) missed while no worker ran were skipped" in caplog.text


def test_a_row_written_without_its_next_fire_time_starts_at_the_next_one():
    row = Schedule.objects.create(name="by hand", job_name=RECORD, cron="@hourly", args=["x"])
    assert scheduler(Clock(dt.datetime(2026, 1, 5, 9, 20, tzinfo=UTC))).run_once().fired == 0
    row.refresh_from_db()
    assert row.next_fire_at == dt.datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    assert fire_times(row) == []


def test_a_hand_made_row_that_cannot_be_read_is_logged_and_the_others_still_fire(caplog):
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    good = schedule("* * * * *", start, name="good")
    for name, fields in (("bad cron", {"cron": "every day"}), ("bad zone", {"time_zone": "X/Y"})):
        Schedule.objects.create(
            name=name,
            job_name=RECORD,
            next_fire_at=good.next_fire_at,
            **{"cron": "@daily", **fields},
        )
    unit = scheduler(Clock(start + dt.timedelta(minutes=1)))
    counts = unit.run_once()
    assert (counts.fired, counts.invalid) == (1, 2)
    assert (
        "schedule 'bad cron' cannot be read (cron 'every day' must have five fields" in caplog.text
    )
    assert "schedule 'bad zone' cannot be read (unknown time zone 'X/Y')" in caplog.text
    assert fire_times(good) == [dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC)]


def test_hand_made_rows_that_cannot_be_read_are_looked_at_again_later_not_at_every_look():
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    for number in range(2):
        Schedule.objects.create(
            name=f"bad {number}", job_name=RECORD, cron="every day", next_fire_at=start
        )
    good = schedule("* * * * *", start, name="good")
    clock = Clock(start + dt.timedelta(minutes=1))
    unit = scheduler(clock, limit=2, check_seconds=10.0)
    assert unit.run_once().invalid == 2
    assert unit.run_once().fired == 1 and unit.wait_seconds() > 0
    assert fire_times(good) == [dt.datetime(2026, 1, 5, 9, 1, tzinfo=UTC)]
    later = clock.now + dt.timedelta(seconds=10)
    assert set(
        Schedule.objects.filter(cron="every day").values_list("next_fire_at", flat=True)
    ) == {later}


def test_more_due_schedules_than_one_look_takes_are_taken_by_the_next_look_at_once():
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    for number in range(5):
        schedule("* * * * *", start, name=f"schedule {number}")
    unit = scheduler(Clock(start + dt.timedelta(minutes=1)), limit=3)
    assert unit.run_once().fired == 3 and unit.wait_seconds() == 0
    assert unit.run_once().fired == 2 and unit.wait_seconds() > 0


CALLED: list = []


def _versioned(x: str, y: str) -> None:
    CALLED.append((x, y))


def test_a_recurring_job_of_version_2_is_fired_as_version_2_and_called_with_its_arguments():
    """The fire writes the job's version as enqueue() does: a row left at the column's default
    (1) was 'upgraded' from 1 at its run, its arguments rewritten by an upgrade meant for rows
    written by an older release."""
    declared = job(
        name="tests.versioned_cron",
        version=2,
        upgrade={1: lambda args, kwargs: ([args[0], "upgraded-from-v1"], kwargs)},
    )(_versioned)
    registry._REGISTRY.pop(declared.name, None)
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    CALLED.clear()
    with registered_for_the_test(declared):
        schedule("* * * * *", start, job_name=declared.name, args=["a", "b"])
        clock = Clock(start + dt.timedelta(minutes=1))
        assert scheduler(clock).run_once().fired == 1
        assert Job.objects.get(name=declared.name).version == 2
        assert run_jobs().succeeded == 1
    assert CALLED == [("a", "b")]


def _limited() -> None:
    pass


def test_a_recurring_job_with_a_concurrency_limit_waits_on_its_key_as_an_enqueued_one():
    """Fired jobs carry the job's flow key and write its row: the plain claim leaves them to
    the flow claim, which holds the limit. (Fired without, they ran beside each other.)"""
    declared = job(name="tests.limited_cron", concurrency_limit=1)(_limited)
    registry._REGISTRY.pop(declared.name, None)
    start = dt.datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)
    with registered_for_the_test(declared):
        schedule("* * * * *", start, job_name=declared.name, args=[], catch_up=2)
        clock = Clock(start + dt.timedelta(minutes=2))
        unit = scheduler(clock)
        assert unit.run_once().fired == 2
        fired = Job.objects.filter(name=declared.name)
        assert {job.flow_key for job in fired} == {f"job:{declared.name}"}
        key = FlowKey.objects.get(key=f"job:{declared.name}")
        assert key.concurrency_limit == 1 and key.ready_at is not None
        claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
        assert operations.complete(connection, claim=claims.take(10)).claimed == []
        flow = operations.claim_jobs_flow(connection, claims.take(10), lanes=8)
        assert len(flow.claimed) == 1  # one at a time: its limit
