"""Staggered replay (docs/howto/repair.md): a filtered set of dead letters requeued in one
statement, due ``1 / rate`` seconds apart, from the admin; the page says how many were scheduled
and when the last runs."""

from __future__ import annotations

import signal

import pytest
from admin_data import PASSWORD, dead_letter, make_user, messages_text, viewer_perms
from django.db import connection
from django.test import Client
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/django_pgjobs/deadletter/"
ADD_POINTS = "testproject.handlers.basics.add_points"


def many_dead_letters(count: int, name: str = ADD_POINTS, queue: str = "handlers") -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgjobs_deadletter (job_id, name, queue, priority, args, kwargs, attempts,
                max_attempts, reason, error_type, errors, created_at, failed_at)
            SELECT i, %s, %s, 0, '["score", 1]', '{}', 3, 3, 'partner down', 'ConnectionError',
                   '[]', now() - interval '1 hour', now() - interval '1 hour' + i * interval '1 ms'
            FROM generate_series(1, %s) AS i
            """,
            [name, queue, count],
        )


def operator(perms=("change_deadletter",)) -> Client:
    make_user("fixer", perms=(*viewer_perms(), *perms))
    client = Client()
    assert client.login(username="fixer", password=PASSWORD)
    return client


def replay(client: Client, ids, rate=None, query: str = "", select_across: bool = False):
    data = {"action": "replay_over_time", "_selected_action": [str(i) for i in ids]}
    if select_across:  # "Select all N" of a filtered list: the filter, not the ids
        data["select_across"] = "1"
    if rate is None:
        data["index"] = "0"  # from the action menu: the page asking the rate
    else:
        data["rate"] = str(rate)
    return client.post(CHANGELIST + query, data)


def db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def test_the_action_asks_the_rate_first_and_writes_nothing():
    client = operator()
    ids = [dead_letter(name=ADD_POINTS).pk for _ in range(3)]
    page = replay(client, ids).content.decode()
    assert "Replay 3 dead letters over time" in page and 'name="rate"' in page
    assert DeadLetter.objects.count() == 3 and not Job.objects.exists()
    for bad in ("0", "-1", "fast", "nan", "1e9"):
        page = replay(client, ids, bad).content.decode()
        assert 'id="pgjobs-refused"' in page, bad
    assert DeadLetter.objects.count() == 3 and not Job.objects.exists()


def test_requeued_spaced_at_the_rate_in_one_statement_and_the_page_says_when_the_last_runs():
    many_dead_letters(101)
    client = operator()
    before = db_now()
    ids = DeadLetter.objects.values_list("id", flat=True)
    response = replay(client, ids, 10)
    assert response.status_code == 302
    assert not DeadLetter.objects.exists() and Job.objects.count() == 101
    times = sorted(Job.objects.values_list("run_after", flat=True))
    gaps = {round((b - a).total_seconds(), 6) for a, b in zip(times, times[1:], strict=False)}
    assert gaps == {0.1}
    assert (times[0] - before).total_seconds() < 5  # the first due now
    assert len(set(Job.objects.values_list("created_at", flat=True))) == 1  # one statement
    (said,) = messages_text(response)
    assert said.startswith("Scheduled 101 jobs at 10/s: the first is due now, the last at ")
    assert f"{times[-1].astimezone():%H:%M:%S}" in said or "(in 10 s)" in said
    assert "(in 10 s)" in said


def test_replay_needs_the_change_permission():
    many_dead_letters(2)
    client = operator(perms=())
    response = replay(client, DeadLetter.objects.values_list("id", flat=True), 10)
    assert DeadLetter.objects.count() == 2 and not Job.objects.exists()
    assert response.status_code in (200, 302, 403)


def test_1000_dead_letters_at_50_per_second_are_drained_in_about_20_seconds_never_faster(
    start_worker,
):
    """Takes about 20 s of wall time: the rate is what is shown."""
    Counter.objects.create(name="score")
    many_dead_letters(1000)
    worker = start_worker("--queue", "handlers", "--concurrency", "4")
    client = operator()
    start = db_now()
    dead_letter(name="other.job")  # not in the filter: stays
    first = DeadLetter.objects.filter(name=ADD_POINTS).first().pk
    form = replay(client, [first], query="?error_type=ConnectionError", select_across=True)
    assert "Replay 1,000 dead letters over time" in form.content.decode()
    response = replay(client, [first], 50, query="?error_type=ConnectionError", select_across=True)
    assert "Scheduled 1,000 jobs at 50/s" in messages_text(response)[0]
    assert Job.objects.count() == 1000 and DeadLetter.objects.count() == 1
    samples = []

    def drained() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT now(), (SELECT value FROM demo_counter WHERE name = 'score')")
            now, done = cursor.fetchone()
        elapsed = (now - start).total_seconds()
        samples.append((elapsed, done))
        return done == 1000

    wait_until(drained, timeout=90, interval=0.25)
    for elapsed, done in samples:  # never ahead of the schedule: 1 now, then 50 a second
        assert done <= 1 + int(elapsed * 50) + 1, (elapsed, done)
    took = samples[-1][0]
    print(f"1000 replayed at 50/s drained in {took:.1f} s")
    assert 19.9 <= took <= 45, took
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()


def test_who_requeued_or_replayed_is_in_the_new_jobs_audit_trail():
    client = operator()
    plain, spread = dead_letter(name=ADD_POINTS), dead_letter(name=ADD_POINTS)
    client.post(f"{CHANGELIST}{plain.pk}/do/requeue/")
    replay(client, [spread.pk], 50)
    [requeued] = Job.objects.get(replayed_from=plain.pk).repairs
    [replayed] = Job.objects.get(replayed_from=spread.pk).repairs
    assert (requeued["by"], requeued["action"]) == ("admin user 'fixer'", "requeue")
    assert (replayed["by"], replayed["action"]) == ("admin user 'fixer'", "replay, 50 a second")
    assert (replayed["dead_letter"], replayed["job_id"]) == (spread.pk, spread.job_id)
