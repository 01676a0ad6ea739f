"""The repair records (docs/howto/repair.md#the-repair-records): an edit of a dead letter's
arguments is recorded in ``pgjobs_repair`` by the statement that requeues it, so who changed what
outlives the dead letter (gone at the requeue) and the job (deleted when it succeeds); pruned with
the dead letters by age; shown read-only in the admin to staff with ``view_repair``, arguments
masked as a job's are."""

from __future__ import annotations

import html
import json
import logging
from datetime import timedelta

import pytest
from admin_data import PASSWORD, dead_letter, make_user, viewer_perms
from django.db import connections
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags
from helpers import run_worker

from django_pgjobs import db, repair, retention
from django_pgjobs.models import DeadLetter, Job, Repair
from testproject.demo import jobs as demo
from testproject.handlers.databases import build_report

pytestmark = pytest.mark.django_db(transaction=True)

ADD_POINTS = "testproject.handlers.basics.add_points"
DAY = 24 * 3600.0
RECORDS = reverse("admin:django_pgjobs_repair_changelist")


def edit_url(pk: int) -> str:
    return reverse("admin:django_pgjobs_deadletter_edit", args=[pk])


def record_url(pk: int) -> str:
    return reverse("admin:django_pgjobs_repair_change", args=[pk])


def logged_in(username: str, perms: tuple[str, ...]) -> Client:
    make_user(username, perms=perms)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


@pytest.fixture
def operator() -> Client:
    return logged_in("fixer", (*viewer_perms(), "change_deadletter", "view_repair"))


def text_of(response) -> str:
    """A page's text, tags left out (a link's words read on)."""
    return html.unescape(strip_tags(response.content.decode()))


def test_an_edit_outlives_the_job_and_repairs_accumulate_until_it_succeeds(operator):
    """Edited, the job fails again (its new dead letter carries the trail); edited again, it
    succeeds and is deleted with its trail. Both edits stay recorded, each saying what came of
    its job."""
    first = dead_letter(
        name=demo.flaky.name, args=["r1"], kwargs={"fail_times": 9}, attempts=1, max_attempts=1
    )
    operator.post(edit_url(first.pk), {"args": '["r1"]', "kwargs": '{"fail_times": 5}'})
    retried = Job.objects.get()
    run_worker(queues=["default"])  # its one attempt fails: dead-lettered again
    again = DeadLetter.objects.get()
    assert again.job_id == retried.pk
    assert [entry["kwargs"] for entry in again.repairs] == [{"fail_times": 5}]

    operator.post(edit_url(again.pk), {"args": '["r1"]', "kwargs": '{"fail_times": 0}'})
    fixed = Job.objects.get()
    assert [entry["kwargs"] for entry in fixed.repairs] == [{"fail_times": 5}, {"fail_times": 0}]
    run_worker(queues=["default"])
    assert not Job.objects.exists() and not DeadLetter.objects.exists()  # succeeded: deleted

    second, earlier = Repair.objects.all()  # newest first
    assert (earlier.dead_letter_id, earlier.job_id, earlier.requeued_as) == (
        first.pk,
        first.job_id,
        retried.pk,
    )
    assert (earlier.kwargs_before, earlier.kwargs, earlier.args) == (
        {"fail_times": 9},
        {"fail_times": 5},
        ["r1"],
    )
    assert (second.dead_letter_id, second.job_id, second.requeued_as) == (
        again.pk,
        retried.pk,
        fixed.pk,
    )
    assert second.error_type == "ConnectionError" and "flaky service" in second.reason
    assert {earlier.repaired_by, second.repaired_by} == {"admin user 'fixer'"}
    assert earlier.name == demo.flaky.name and earlier.queue == "default"

    listed = text_of(operator.get(RECORDS))
    assert f"dead-lettered again, then repaired again: repair #{second.pk}" in listed
    assert "it succeeded" in listed
    page = text_of(operator.get(record_url(earlier.pk)))
    assert '"fail_times": 9' in page and '"fail_times": 5' in page  # before and after
    assert "admin user 'fixer'" in page


def test_the_record_says_what_its_job_is_doing_while_it_exists(operator):
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    operator.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    job = Job.objects.get()
    record = Repair.objects.get()
    page = operator.get(record_url(record.pk)).content.decode()
    assert f'href="{reverse("admin:django_pgjobs_job_change", args=[job.pk])}"' in page
    assert ">ready<" in page
    token = "00000000-0000-0000-0000-000000000001"
    Job.objects.filter(pk=job.pk).update(status="running", attempts=1, claim_token=token)
    error = json.dumps([{"type": "ValueError", "message": "again"}])
    params = {"id": job.pk, "token": token, "reason": "again", "error_type": "ValueError"}
    db.execute(db.jobs_connection(), "dead_letter_job", {**params, "error": error})
    again = DeadLetter.objects.get()
    page = text_of(operator.get(record_url(record.pk)))
    assert f"dead-lettered again: dead letter #{again.pk}" in page


def test_nothing_is_recorded_when_the_edit_requeues_nothing(operator):
    """A second edit of the same dead letter (another admin's, a second tab) finds it gone:
    no job, and no record of an edit that did not happen."""
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    conn = db.jobs_connection()
    edit = (conn, broken.pk, ADD_POINTS, ["score", 7], {})
    assert repair.requeue_edited(*edit, by="admin user 'a'") is not None
    assert repair.requeue_edited(*edit, by="admin user 'b'") is None
    assert Repair.objects.get().repaired_by == "admin user 'a'"


def test_records_are_pruned_with_the_dead_letters_by_age_only():
    now = timezone.now()
    for days in (40, 35, 31, 2):
        Repair.objects.create(
            repaired_at=now - timedelta(days=days),
            repaired_by="admin user 'a'",
            name=ADD_POINTS,
            queue="handlers",
            dead_letter_id=days,
            job_id=days,
            requeued_as=100 + days,
            reason="boom",
        )
    conn = db.jobs_connection()
    log = logging.getLogger("test")
    # the per-name cap applies to dead letters alone: the records stay
    retention.prune_in_batches(conn, None, 0, 1, log=log)
    assert Repair.objects.count() == 4
    # batches of one: the run goes on while records are left past the age, dead letters or not
    run = retention.prune_in_batches(conn, 30 * DAY, None, 1, log=log)
    assert run.finished
    assert list(Repair.objects.values_list("dead_letter_id", flat=True)) == [2]


def test_only_staff_with_view_repair_see_the_records_and_nobody_changes_them(operator):
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    operator.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    record = Repair.objects.get()
    viewer = logged_in("viewer", (*viewer_perms(), "change_deadletter"))
    assert viewer.get(RECORDS).status_code == 403
    assert viewer.get(record_url(record.pk)).status_code == 403
    anonymous = Client().get(RECORDS)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    everything = logged_in("all", ("view_repair", "change_repair", "delete_repair"))
    delete = reverse("admin:django_pgjobs_repair_delete", args=[record.pk])
    assert everything.post(delete, {"post": "yes"}).status_code == 403
    assert everything.post(record_url(record.pk), {"repaired_by": "nobody"}).status_code == 403
    assert Repair.objects.get().repaired_by == "admin user 'fixer'"


def test_the_record_masks_the_values_the_admin_redacts(operator, settings):
    """By key, and a positional argument by its parameter's name (``counter`` here), on the
    record's page, in the whole value, and in the trail on the job's page."""
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    secret = "sk_live_do_not_show"
    operator.post(edit_url(broken.pk), {"args": json.dumps([secret, 7]), "kwargs": "{}"})
    record = Repair.objects.get()
    settings.PGJOBS = {**getattr(settings, "PGJOBS", {}), "REDACT_KEYS": ["counter"]}
    for url in (
        record_url(record.pk),
        reverse("admin:django_pgjobs_repair_value", args=[record.pk, "args"]),
        reverse("admin:django_pgjobs_job_change", args=[record.requeued_as]),
    ):
        shown = text_of(operator.get(url))
        assert secret not in shown and "********" in shown, url


def test_a_long_argument_is_shown_cut_with_a_link_to_the_whole_value(operator):
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    long = "x" * 20_000
    operator.post(edit_url(broken.pk), {"args": json.dumps([long, 7]), "kwargs": "{}"})
    record = Repair.objects.get()
    page = text_of(operator.get(record_url(record.pk)))
    assert "more bytes not shown" in page and long not in page
    whole = operator.get(reverse("admin:django_pgjobs_repair_value", args=[record.pk, "args"]))
    assert json.loads(whole.content) == [long, 7]


def test_a_record_reads_in_the_project_zone_with_use_tz_false(operator):
    broken = dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})
    operator.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    aware = Repair.objects.get().repaired_at
    connections.close_all()
    try:
        with override_settings(USE_TZ=False, TIME_ZONE="America/Santiago"):
            record = Repair.objects.get()
            assert record.repaired_at.tzinfo is None
            local = timezone.make_aware(record.repaired_at)
            assert abs(local - aware) < timedelta(seconds=1)
            page = operator.get(record_url(record.pk)).content.decode()
            assert f"{record.repaired_at:%Y-%m-%d %H:%M:%S}" in page
    finally:
        connections.close_all()


@pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)
def test_an_edit_on_another_database_is_recorded_and_listed_there(operator, settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2"}}
    broken = DeadLetter.objects.using("jobs2").create(
        job_id=7, name=build_report.name, queue="heavy", args=["2026-10"], reason="boom",
        created_at=timezone.now(),
    )  # fmt: skip
    edit = edit_url(broken.pk) + "?_database=jobs2"
    operator.post(edit, {"args": '["2026-11"]', "kwargs": "{}"})
    record = Repair.objects.using("jobs2").get()
    assert record.args == ["2026-11"] and not Repair.objects.using("default").exists()
    listed = operator.get(RECORDS, {"_database": "jobs2"}).content.decode()
    assert record_url(record.pk) in listed
    assert (
        record_url(record.pk)
        not in operator.get(RECORDS, {"_database": "default"}).content.decode()
    )
