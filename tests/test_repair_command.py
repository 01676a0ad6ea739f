"""``manage.py pgjobs requeue --rate``: the admin's staggered replay from a shell (the same
statement, batch after batch at one rate), the dead letters' filters (name, queue, error type,
age); ``manage.py pgjobs prune`` pruning dead letters as the workers do (bounded batches, logged,
counted). docs/howto/repair.md, docs/reference/pgjobs-command.md."""

from __future__ import annotations

import dataclasses
import logging
import re
import shlex
import threading

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum
from helpers import ROOT, start_command, wait_until
from test_pgjobs_command import pgjobs
from test_replay import db_now

from django_pgjobs import console, operations, pruning, replays
from django_pgjobs.admin import display
from django_pgjobs.admin.actions import DEAD_LETTER_ACTIONS
from django_pgjobs.models import DeadLetter, Job, QueueStat
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

RECORD = "testproject.demo.jobs.record"
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
DAY = 86400


def dead_letters(
    count: int,
    name: str = RECORD,
    error_type: str = "ConnectionError",
    hours_ago: float = 1.0,
    queue: str = "default",
) -> None:
    """``count`` dead letters failed ``hours_ago`` hours ago, 1 ms apart (the first oldest)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgjobs_deadletter (job_id, name, queue, priority, args, kwargs, attempts,
                max_attempts, reason, error_type, errors, created_at, failed_at)
            SELECT i, %s, %s, 0, '["replay"]', '{}', 3, 3, 'partner down', %s, '[]',
                   now() - %s * interval '1 hour',
                   now() - %s * interval '1 hour' + i * interval '1 ms'
            FROM generate_series(1, %s) AS i
            """,
            [name, queue, error_type, hours_ago, hours_ago, count],
        )


def gaps(times) -> set[float]:
    return {round((b - a).total_seconds(), 6) for a, b in zip(times, times[1:], strict=False)}


def replayed_in_order() -> list:
    """The new jobs' due times, in the order their dead letters failed."""
    jobs = Job.objects.order_by("run_after").values_list("replayed_from", "run_after")
    return list(jobs)


def test_requeue_at_a_rate_spreads_the_selection_as_the_admins_replay():
    dead_letters(5, error_type="ConnectionError")
    dead_letters(2, error_type="ValueError")
    failed_order = list(
        DeadLetter.objects.filter(error_type="ConnectionError")
        .order_by("failed_at")
        .values_list("id", flat=True)
    )
    before = db_now()
    out = pgjobs("requeue", "--error-type", "ConnectionError", "--rate", "10/s").splitlines()
    assert re.fullmatch(
        rf"Scheduled 5 jobs at 10/s: the first is due now, the last at ({TIME}) \(in 400 ms\)\.",
        out[0],
    ), out
    jobs = replayed_in_order()
    assert [dead for dead, _ in jobs] == failed_order  # oldest first
    times = [due for _, due in jobs]
    assert gaps(times) == {0.1} and (times[0] - before).total_seconds() < 5
    assert f"the last at {display.local(times[-1]):%Y-%m-%d %H:%M:%S} " in out[0]
    assert out[1] == "ids: " + ", ".join(
        f"#{i}" for i in sorted(Job.objects.values_list("id", flat=True))
    )
    assert sorted(DeadLetter.objects.values_list("error_type", flat=True)) == ["ValueError"] * 2
    [entry] = Job.objects.get(replayed_from=failed_order[0]).repairs
    assert (entry["by"], entry["action"]) == ("manage.py pgjobs", "replay, 10 a second")


def test_the_rate_holds_from_one_batch_to_the_next(monkeypatch):
    monkeypatch.setattr(replays, "BULK_LIMIT", 7)  # 20 dead letters: 3 statements
    dead_letters(20)
    out = pgjobs("requeue", "--name", RECORD, "--rate", "300/m")
    assert out.startswith("Scheduled 20 jobs at 300/m: the first is due now, the last at ")
    assert "(in 3.8 s)" in out
    jobs = replayed_in_order()
    assert [dead for dead, _ in jobs] == sorted(dead for dead, _ in jobs)  # oldest first
    assert gaps([due for _, due in jobs]) == {0.2}  # 5 a second across the batches
    assert Job.objects.values("created_at").distinct().count() == 3


@pytest.mark.parametrize("rate", [None, "6000/m"])
def test_a_requeue_acts_on_the_dead_letters_selected_when_it_starts(monkeypatch, rate):
    """Jobs requeued by the first batches that fail again within seconds are new dead letters
    of the same filters: they were requeued by the next batches, and so on while the failures
    kept pace (a partner still down). Now they are left for the next command."""
    monkeypatch.setattr(console, "BULK_LIMIT", 3)
    monkeypatch.setattr(replays, "BULK_LIMIT", 3)
    requeue = operations.requeue_dead_letters

    def requeue_then_they_fail_again(conn, ids, **kwargs):
        dead_letters(len(ids))  # as many new ones, matching the same filters
        return requeue(conn, ids, **kwargs)

    spread = operations.requeue_dead_letters_spread

    def spread_then_they_fail_again(conn, ids, *args, **kwargs):
        dead_letters(len(ids))
        return spread(conn, ids, *args, **kwargs)

    monkeypatch.setitem(
        DEAD_LETTER_ACTIONS,
        "requeue",
        dataclasses.replace(DEAD_LETTER_ACTIONS["requeue"], operation=requeue_then_they_fail_again),
    )
    monkeypatch.setattr(operations, "requeue_dead_letters_spread", spread_then_they_fail_again)
    dead_letters(7)
    first = set(DeadLetter.objects.values_list("id", flat=True))
    pgjobs("requeue", "--name", RECORD, *(["--rate", rate] if rate else []))
    assert set(Job.objects.values_list("replayed_from", flat=True)) == first
    assert not DeadLetter.objects.filter(id__in=first).exists()  # the new ones are left


def test_dead_letters_chosen_by_age_with_a_dry_run_first():
    dead_letters(2, hours_ago=0.5)
    dead_letters(3, hours_ago=3)
    dead_letters(4, hours_ago=72, name="testproject.demo.jobs.other")
    dry = pgjobs("requeue", "--died-within", "1h", "--rate", "50", "--dry-run")
    assert re.fullmatch(
        rf"Would schedule 2 jobs at 50/s: the first due now, the last at about {TIME} "
        r"\(in 20 ms\)\.\n",
        dry,
    ), dry
    dry = pgjobs("requeue", "--name", RECORD, "--older-than", "2h", "--rate", "1/s", "--dry-run")
    assert "Would schedule 3 jobs at 1/s" in dry and "(in 2.0 s)" in dry
    assert pgjobs("delete", "--older-than", "2d", "--dry-run") == "Would delete 4 dead letters.\n"
    rows = console.list_dead_letters(console.Selection(older_than=2 * DAY), 50)
    assert {row["name"] for row in rows} == {"testproject.demo.jobs.other"} and len(rows) == 4
    assert DeadLetter.objects.count() == 9 and not Job.objects.exists()
    out = pgjobs("requeue", "--died-within", "4h", "--older-than", "2h", "--rate", "100/h")
    assert out.startswith("Scheduled 3 jobs at 100/h") and "(in 1 min 12 s)" in out
    assert Job.objects.count() == 3 and DeadLetter.objects.count() == 6


def test_a_plain_requeue_of_the_command_is_in_the_audit_trail_too():
    dead_letters(1)
    pgjobs("requeue", "--name", RECORD)
    [entry] = Job.objects.get().repairs
    assert (entry["by"], entry["action"]) == ("manage.py pgjobs", "requeue")


def test_dead_letters_left_alone_are_reported():
    dead_letters(2)
    DeadLetter.objects.filter(job_id=1).update(unique_key="k")
    Job.objects.create(name=RECORD, unique_key="k")  # holds the key: that dead letter stays
    out = pgjobs("requeue", "--name", RECORD, "--rate", "5").splitlines()
    assert out[0].startswith("Scheduled 1 job at 5/s")
    assert out[2].startswith("1 selected dead letter was left alone (already requeued")
    assert DeadLetter.objects.count() == 1


N = ("--name", RECORD)  # the seeded dead letters


@pytest.mark.parametrize(
    "args, error",
    [
        ((*N, "--rate", "fast"), "argument --rate: the rate must be a number of jobs per second"),
        ((*N, "--rate", "0"), "argument --rate: the rate must be more than 0"),
        ((*N, "--rate=-5/s"), "argument --rate: the rate must be more than 0"),
        ((*N, "--rate", "50/x"), "argument --rate: the rate must be a number"),
        ((*N, "--rate", "1e6"), "from 1/h to 10000/s, not '1e6'"),
        (("--name", "nope.job", "--rate", "50"), "no dead letter matches"),
        ((*N, "--died-within", "1m", "--rate", "50"), "no dead letter matches"),
        (("--error-type", "Nope", "--rate", "50", "--dry-run"), "no dead letter matches"),
        (("--rate", "50"), "name dead letters by id or by a filter"),
        (("--queue", "emial", "--rate", "50"), "unknown queue 'emial'"),
        (("99999", "--rate", "50"), "no dead letter with id #99999"),
        ((*N, "--died-within", "soon", "--rate", "50"), "not a duration: 'soon'"),
        ((*N, "--older-than", "0", "--rate", "50"), "not a duration: '0'"),
    ],
)
def test_bad_input_to_a_replay_is_refused_and_changes_nothing(args, error):
    dead_letters(3)
    with pytest.raises(CommandError, match=re.escape(error)):
        pgjobs("requeue", *args)
    assert DeadLetter.objects.count() == 3 and not Job.objects.exists()


# -- prune ----------------------------------------------------------------------------------------


def test_prune_deletes_dead_letters_past_the_settings_retention_logged_and_counted(
    settings, caplog
):
    settings.PGJOBS = {
        **settings.PGJOBS,
        "DEAD_LETTER_MAX_AGE_SECONDS": 7 * DAY,
        "DEAD_LETTER_PRUNE_BATCH": 10,
    }
    dead_letters(25, hours_ago=240, queue="payments")
    dead_letters(3)
    with caplog.at_level(logging.INFO, logger="django_pgjobs"):
        out = pgjobs("prune")
    assert out == (
        "Pruned 0 successful jobs past their retention.\n"
        "Pruned 25 dead letters past their retention (failed over 7 d ago).\n"
    )
    assert "pruned 25 dead letters past their retention" in caplog.text
    assert DeadLetter.objects.count() == 3
    assert QueueStat.objects.get(queue="payments").pruned == 25


def test_prune_options_replace_the_settings_for_one_run():
    dead_letters(5, name="shop.charge", hours_ago=1)
    dead_letters(1, name="shop.refund", hours_ago=1)
    newest = set(DeadLetter.objects.filter(name="shop.charge").order_by("-failed_at")[:2])
    out = pgjobs("prune", "--keep-per-name", "2").splitlines()
    assert (
        out[1] == "Pruned 3 dead letters past their retention (beyond the newest 2 per job name)."
    )
    assert set(DeadLetter.objects.filter(name="shop.charge")) == newest
    dead_letters(4, name="shop.refund", hours_ago=50)
    out = pgjobs("prune", "--dead-letters-older-than", "2d", "--keep-per-name", "10").splitlines()
    assert out[1] == (
        "Pruned 4 dead letters past their retention (failed over 2 d ago; beyond the newest 10 "
        "per job name)."
    )
    assert DeadLetter.objects.count() == 3


@pytest.mark.parametrize(
    "args, error",
    [
        (("--keep-per-name", "-1"), "argument --keep-per-name: not a count: '-1'"),
        (("--keep-per-name=-1",), "not a count: '-1'"),
        (("--keep-per-name", "all"), "not a count: 'all'"),
        (("--dead-letters-older-than", "0"), "not a duration: '0'"),
        (("--dead-letters-older-than", "30 days"), "not a duration: '30 days'"),
    ],
)
def test_bad_prune_options_are_refused_and_change_nothing(args, error):
    dead_letters(3, hours_ago=1000)
    with pytest.raises(CommandError, match=re.escape(error)):
        pgjobs("prune", *args)
    assert DeadLetter.objects.count() == 3


def test_prune_takes_turns_with_a_worker_pruning_at_the_same_time(other_connection):
    """A worker's batch holds the pruning's advisory lock for one statement: the command waits
    for its turn instead of stopping (a worker stops: the one pruning goes on)."""
    dead_letters(12, hours_ago=1000)
    locked, release = threading.Event(), threading.Event()

    def worker_batch() -> None:
        with other_connection.transaction():
            other_connection.execute(
                "SELECT pg_advisory_xact_lock(hashtext('django_pgjobs.prune_dead_letters'))"
            )
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=worker_batch)
    holder.start()
    assert locked.wait(10)
    threading.Timer(0.3, release.set).start()
    out = pgjobs("prune", "--dead-letters-older-than", "30d")
    holder.join()
    assert out.splitlines()[1].startswith("Pruned 12 dead letters past their retention")
    assert not DeadLetter.objects.exists()


def test_prune_stops_when_its_turn_never_comes_and_says_so(other_connection, monkeypatch):
    monkeypatch.setattr(pruning, "PRUNE_TURN_WAIT_SECONDS", 0.2)
    dead_letters(2, hours_ago=1000)
    with other_connection.transaction():
        other_connection.execute(
            "SELECT pg_advisory_xact_lock(hashtext('django_pgjobs.prune_dead_letters'))"
        )
        out = pgjobs("prune", "--dead-letters-older-than", "30d").splitlines()
    assert out[1:] == [
        "Pruned 0 dead letters past their retention (failed over 30 d ago).",
        "Stopped early: another process kept the dead letters' pruning; run again.",
    ]
    assert DeadLetter.objects.count() == 2


# -- real processes -------------------------------------------------------------------------------


def test_200_dead_letters_replayed_at_50_per_second_by_the_command_run_in_about_4_s_never_early(
    start_worker, tmp_path
):
    """``manage.py pgjobs requeue --rate 50/s`` as an operator runs it, a real ``runjobs``
    draining: every job starts at or after its due time, the last about 4 s after the first."""
    dead_letters(200)
    dead_letters(3, name="testproject.demo.jobs.other")  # not selected: stays
    worker = start_worker("--concurrency", "4", env={"PGJOBS_KEEP_SUCCEEDED_SECONDS": "600"})
    command = start_command(
        "pgjobs",
        ["requeue", "--name", RECORD, "--error-type", "ConnectionError", "--rate", "50/s"],
        tmp_path / "pgjobs.log",
        None,
    )
    assert command.wait(60) == 0, command.output()
    said = command.output().splitlines()
    assert said[0].startswith("Scheduled 200 jobs at 50/s: the first is due now, the last at ")
    assert said[0].endswith("(in 4.0 s).")
    wait_until(lambda: Execution.objects.count() >= 200, timeout=60, interval=0.1)
    wait_until(lambda: not Job.objects.exclude(status="successful").exists(), timeout=10)
    jobs = list(Job.objects.order_by("run_after").values_list("run_after", "started_at"))
    assert len(jobs) == 200 and Execution.objects.count() == 200  # each ran once
    assert gaps([due for due, _ in jobs]) == {0.02}
    early = [(due, started) for due, started in jobs if started < due]
    assert early == []  # the schedule held: no job started before its time
    took = (jobs[-1][1] - jobs[0][0]).total_seconds()
    late = max((started - due).total_seconds() for due, started in jobs)
    print(
        f"200 replayed at 50/s by the command: drained in {took:.2f} s, latest start +{late:.2f} s"
    )
    assert 3.98 <= took <= 10, took
    assert DeadLetter.objects.count() == 3
    worker.signal(15)
    assert worker.wait(60) == 0, worker.output()


def test_prune_run_as_a_process_against_a_seeded_table(tmp_path):
    """``manage.py pgjobs prune`` as cron runs it, with the retention settings: 5,000 old dead
    letters of two names pruned in batches of 1,000, the newest per name kept."""
    dead_letters(3000, name="shop.charge", hours_ago=24 * 40, queue="payments")
    dead_letters(2000, name="mail.send", hours_ago=24 * 40, queue="mail")
    dead_letters(60, name="shop.charge", hours_ago=1, queue="payments")
    dead_letters(40, name="mail.send", hours_ago=1, queue="mail")
    env = {"PGJOBS_DEAD_LETTER_MAX_AGE_SECONDS": str(30 * DAY)}
    first = start_command("pgjobs", ["prune"], tmp_path / "prune-1.log", env)
    assert first.wait(60) == 0, first.output()
    said = first.output().splitlines()  # stderr (the project's log) and stdout
    assert "Pruned 5,000 dead letters past their retention (failed over 30 d ago)." in said
    assert any(
        line.endswith("django_pgjobs: pruned 5000 dead letters past their retention")
        for line in said
    )
    assert DeadLetter.objects.count() == 100
    env["PGJOBS_DEAD_LETTER_MAX_PER_NAME"] = "25"
    second = start_command("pgjobs", ["prune"], tmp_path / "prune-2.log", env)
    assert second.wait(60) == 0, second.output()
    assert "Pruned 50 dead letters" in second.output()
    assert dict(DeadLetter.objects.values_list("name").annotate(Sum("attempts"))) == {
        "shop.charge": 75,
        "mail.send": 75,
    }
    stats = dict(QueueStat.objects.values_list("queue").annotate(Sum("pruned")))
    assert stats == {"payments": 3035, "mail": 2015}


# -- the documented examples ----------------------------------------------------------------------


def seed_repair_howto() -> None:
    dead_letters(1000, name="shop.jobs.charge", hours_ago=0.5)  # the replay's
    dead_letters(20, name="shop.jobs.charge", hours_ago=5)  # not within 2h
    dead_letters(2000, name="shop.jobs.refund", error_type="ValueError", hours_ago=24 * 40)
    dead_letters(500, name="mail.send", error_type="ValueError", hours_ago=0.2)  # 100 kept


def seed_command_reference() -> None:
    dead_letters(150, name="shop.jobs.charge", hours_ago=3)  # the replay's
    dead_letters(30, name="shop.jobs.charge", hours_ago=0.5)  # not older than 1h
    dead_letters(2000, name="shop.jobs.refund", error_type="ValueError", hours_ago=24 * 40)
    dead_letters(500, name="mail.send", error_type="ValueError", hours_ago=0.2)


CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def console_examples(page: str) -> list[tuple[list[str], list[str]]]:
    """Each ``$ manage.py pgjobs ...`` line of the page's ``console`` blocks: (its arguments,
    the lines shown after it)."""
    examples: list[tuple[list[str], list[str]]] = []
    for block in CONSOLE.findall((ROOT / page).read_text()):
        for line in block.splitlines():
            if line.startswith("$ "):
                command = shlex.split(line[2:])
                assert command[:2] == ["manage.py", "pgjobs"], line
                examples.append((command[2:], []))
            else:
                examples[-1][1].append(line)
    return examples


def shown(line: str) -> str:
    """A documented output line as a pattern: its times and ids stand for any."""
    pattern = re.escape(line)
    pattern = re.sub(r"\d{4}\\-\d\d\\-\d\d\\ \d\d:\d\d:\d\d", lambda _: TIME, pattern)
    return re.sub(r"\\#\d+", lambda _: r"\#\d+", pattern)


@pytest.mark.parametrize(
    "page, seed",
    [
        ("docs/howto/repair.md", seed_repair_howto),
        ("docs/reference/pgjobs-command.md", seed_command_reference),
    ],
    ids=["repair how-to", "command reference"],
)
def test_the_documented_replays_and_prunes_say_what_the_pages_show(page, seed):
    """The ``console`` blocks of the pages run in order against the seed, each output line as
    shown (times and ids aside)."""
    seed()
    examples = console_examples(page)
    assert len(examples) >= 3
    for args, lines in examples:
        out = pgjobs(*args).splitlines()
        assert len(out) == len(lines), (args, out)
        for said, line in zip(out, lines, strict=True):
            assert re.fullmatch(shown(line), said), (args, said, line)
