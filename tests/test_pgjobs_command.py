"""``manage.py pgjobs``: the admin's numbers and actions from a shell, each one the admin's
operation, reporting what it touched; bad input refused with a clear error."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from admin_data import dead_letter, job
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_pgjobs.models import DeadLetter, Job, QueueStat, QueueState, Worker

pytestmark = pytest.mark.django_db(transaction=True)


def pgjobs(*args: str) -> str:
    out = StringIO()
    call_command("pgjobs", *args, stdout=out)
    return out.getvalue()


def later(**delta):
    return timezone.now() + timedelta(**delta)


def earlier(**delta):
    return timezone.now() - timedelta(**delta)


def seed_emails() -> None:
    """Queue "emails": 2 due (the older enqueued 10 min ago), 1 scheduled, 1 retrying, 2
    running (one lease expired), 3 dead letters (1 in the last hour), paused; a minute of
    statistics; one live worker. Queue "reports": 1 due."""
    for minutes in (10, 1):
        job(queue="emails", run_after=earlier(minutes=minutes), created_at=earlier(minutes=minutes))
    job(queue="emails", run_after=later(hours=1))
    job(queue="emails", attempts=1, run_after=later(minutes=5))
    job(queue="emails", status="running", attempts=1, lease_expires_at=later(minutes=1))
    job(queue="emails", status="running", attempts=1, lease_expires_at=earlier(minutes=1))
    for hours in (0, 3, 5):
        dead_letter(queue="emails", failed_at=earlier(hours=hours, minutes=1))
    job(queue="reports")
    QueueState.objects.create(name="emails", paused=True)
    minute = timezone.now().replace(second=0, microsecond=0)
    QueueStat.objects.create(
        queue="emails", minute=minute, succeeded=30, retried=6, dead_lettered=4, wait_buckets=[]
    )
    Worker.objects.create(
        id="host:1:abc", hostname="host", pid=1, queues=["emails"], concurrency=4,
        started_at=earlier(minutes=5), last_seen_at=timezone.now(),
    )  # fmt: skip


def test_status_json_gives_the_dashboards_numbers_per_queue():
    seed_emails()
    data = json.loads(pgjobs("status", "--json"))
    emails = next(q for q in data["queues"] if q["queue"] == "emails")
    assert {key: emails[key] for key in ("due", "scheduled", "retrying", "running")} == {
        "due": 2,
        "scheduled": 1,
        "retrying": 1,
        "running": 2,
    }
    assert emails["lease_expired"] == 1
    assert emails["paused"] is True
    assert emails["dead_letters"] == 3 and emails["dead_letters_last_hour"] == 1
    assert 590 < emails["oldest_due_seconds"] < 700
    assert emails["succeeded_last_hour"] == 30 and emails["failed_last_hour"] == 10
    assert emails["failure_rate"] == pytest.approx(0.25)
    assert emails["throughput_per_minute"] > 0
    reports = next(q for q in data["queues"] if q["queue"] == "reports")
    assert reports["due"] == 1 and reports["paused"] is False
    assert data["totals"]["due"] == 3 and data["totals"]["dead_letters"] == 3
    assert data["workers_alive"] == 1
    assert data["workers"][0]["queues"] == "emails" and data["workers"][0]["alive"] is True


def test_status_table_shows_one_line_per_queue():
    seed_emails()
    lines = pgjobs("status").splitlines()
    assert lines[0].split()[:3] == ["queue", "due", "scheduled"]
    emails = next(line for line in lines if line.startswith("emails"))
    assert emails.split()[:8] == ["emails", "(paused)", "2", "1", "1", "2", "1", "3"]
    assert "25.0 %" in emails
    assert lines[-1] == "workers alive: 1 of 1 registered"


def test_list_filters_by_queue_state_and_name_and_limits():
    seed_emails()
    rows = json.loads(pgjobs("list", "--queue", "emails", "--state", "due", "--json"))
    assert [row["state"] for row in rows] == ["due", "due"]
    assert rows[0]["run_after"] < rows[1]["run_after"]  # claim order, as in the admin
    other = job(queue="emails", name="testproject.demo.jobs.other")
    rows = json.loads(pgjobs("list", "--name", "testproject.demo.jobs.other", "--json"))
    assert [row["id"] for row in rows] == [other.id]
    rows = json.loads(pgjobs("list", "--state", "lease_expired", "--json"))
    assert len(rows) == 1 and rows[0]["state"] == "running"
    assert len(json.loads(pgjobs("list", "--limit", "3", "--json"))) == 3
    text = pgjobs("list", "--queue", "reports")
    assert text.splitlines()[0].split() == list(
        ("id", "name", "queue", "state", "attempts", "run_after", "last_error")
    )
    assert "reports" in text.splitlines()[1] and "0/5" in text


def test_list_writes_control_characters_from_rows_as_escapes():
    """An error message (or a hand-made queue name) holding an escape sequence reaches the
    operator's terminal as text, not as a command to it."""
    dead_letter(queue="q\x1b]0;owned\x07", error_type="ValueError", reason="\x1b[2Jboom")
    job(queue="emails", errors=[{"type": "ValueError", "message": "\x1b[31mred\ttab"}])
    for args in (["list", "--dead-letters"], ["list"]):
        text = pgjobs(*args)
        assert "\x1b" not in text and "\x07" not in text, text
    assert "q\\x1b]0;owned\\x07" in pgjobs("list", "--dead-letters")
    assert "\\x1b[31mred" in pgjobs("list")


def test_list_dead_letters_by_error_type():
    dead_letter(queue="emails", error_type="Timeout")
    wanted = dead_letter(queue="emails", error_type="ValueError")
    rows = json.loads(pgjobs("list", "--dead-letters", "--error-type", "ValueError", "--json"))
    assert [row["id"] for row in rows] == [wanted.id]


def test_requeue_by_id_makes_fresh_jobs_and_says_how_many():
    letters = [dead_letter(queue="emails", args=[i]) for i in range(3)]
    out = pgjobs("requeue", str(letters[0].id), f"#{letters[1].id}")
    assert out.splitlines()[0] == "Requeued 2 jobs."
    assert sorted(j.args for j in Job.objects.all()) == [[0], [1]]
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [letters[2].id]
    new_ids = ", ".join(f"#{i}" for i in sorted(Job.objects.values_list("id", flat=True)))
    assert out.splitlines()[1] == f"ids: {new_ids}"


def test_requeue_by_filter_leaves_a_held_unique_key_alone_and_says_so():
    dead_letter(queue="emails", error_type="Timeout")
    dead_letter(queue="emails", error_type="Timeout", unique_key="k")
    job(queue="emails", unique_key="k")  # the key is held: that dead letter stays
    dead_letter(queue="emails", error_type="ValueError")
    out = pgjobs("requeue", "--queue", "emails", "--error-type", "Timeout")
    assert out.splitlines()[0] == "Requeued 1 job."
    assert "1 selected dead letter was left alone" in out
    assert sorted(DeadLetter.objects.values_list("error_type", flat=True)) == [
        "Timeout",
        "ValueError",
    ]


def test_delete_dead_letters_by_filter_with_dry_run_first():
    for _ in range(3):
        dead_letter(name="testproject.demo.jobs.always_fails")
    kept = dead_letter(name="testproject.demo.jobs.other")
    assert pgjobs("delete", "--name", "testproject.demo.jobs.always_fails", "--dry-run") == (
        "Would delete 3 dead letters.\n"
    )
    assert DeadLetter.objects.count() == 4
    out = pgjobs("delete", "--name", "testproject.demo.jobs.always_fails")
    assert out.splitlines()[0] == "Deleted 3 dead letters."
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [kept.id]


def test_pause_and_resume_a_queue():
    job(queue="emails")
    assert pgjobs("pause", "emails") == "Paused queue emails.\n"
    assert QueueState.objects.get(name="emails").paused
    assert pgjobs("pause", "emails") == "Paused queue emails (it was already paused).\n"
    assert pgjobs("resume", "emails") == "Resumed queue emails.\n"
    assert not QueueState.objects.get(name="emails").paused


def test_purge_cancels_waiting_jobs_of_the_filter_only():
    due = [job(queue="emails", args=[i]) for i in range(3)]
    retrying = job(queue="emails", attempts=1, run_after=later(minutes=5))
    running = job(queue="emails", status="running", attempts=1, lease_expires_at=later(minutes=1))
    other = job(queue="reports")
    assert pgjobs("purge", "--queue", "emails", "--dry-run") == "Would cancel 4 jobs.\n"
    assert Job.objects.count() == 6
    out = pgjobs("purge", "--queue", "emails", "--state", "due")
    assert out.splitlines()[0] == "Cancelled 3 jobs."
    assert out.splitlines()[1] == "ids: " + ", ".join(f"#{j.id}" for j in due)
    assert sorted(Job.objects.values_list("id", flat=True)) == [retrying.id, running.id, other.id]
    assert pgjobs("purge", "--queue", "emails").splitlines()[0] == "Cancelled 1 job."
    assert sorted(Job.objects.values_list("id", flat=True)) == [running.id, other.id]
    assert pgjobs("purge", str(running.id)).splitlines() == [
        "Cancelled 0 jobs.",
        "1 selected job was left alone (only due, retrying or scheduled jobs are cancelled; a "
        "running one is its worker's).",
    ]
    assert Job.objects.filter(id=running.id).exists()


def test_prune_deletes_successful_jobs_past_their_retention():
    old = earlier(days=8)
    for _ in range(2):
        job(status="successful", attempts=1, finished_at=old)
    kept = job(status="successful", attempts=1, keep_result=True, finished_at=earlier(days=1))
    waiting = job()
    assert pgjobs("prune") == "Pruned 2 successful jobs past their retention.\n"
    assert sorted(Job.objects.values_list("id", flat=True)) == [kept.id, waiting.id]


@pytest.mark.parametrize(
    "args, error",
    [
        (("purge",), "purge needs a filter"),
        (("delete",), "name dead letters by id or by a filter"),
        (("requeue",), "name dead letters by id or by a filter"),
        (("purge", "--queue", "emial"), "unknown queue 'emial'; queues in use:"),
        (("pause", "emial"), "unknown queue 'emial'"),
        (("list", "--queue", "emial"), "unknown queue 'emial'"),
        (("delete", "99999"), "no dead letter with id #99999"),
        (("purge", "99999"), "no job with id #99999"),
        (("list", "--error-type", "X"), "--error-type filters dead letters"),
        (("list", "--older-than", "1h"), "--older-than filters dead letters"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(args, error):
    job(queue="emails")
    dead_letter(queue="emails")
    with pytest.raises(CommandError, match=error.replace("(", r"\(")):
        pgjobs(*args)
    assert Job.objects.count() == 1 and DeadLetter.objects.count() == 1


@pytest.mark.parametrize(
    "args, error",
    [
        (("delete", "abc"), "not an id: 'abc'"),
        (("list", "--limit", "0"), "--limit takes 1 to 10,000"),
        (("list", "--state", "lost"), "invalid choice: 'lost'"),
        (("purge", "--state", "running"), "invalid choice: 'running'"),
    ],
)
def test_malformed_arguments_are_refused_by_the_parser(args, error):
    with pytest.raises(CommandError, match=error):
        pgjobs(*args)
