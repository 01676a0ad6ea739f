"""Schedules in the admin (django_pgjobs/admin/schedules.py) and the system check for a
schedule whose job is gone: add, edit, pause, resume and run now, with the permissions each
needs, and the same in a browser against a real worker."""

from __future__ import annotations

import datetime as dt
import html
import threading

import pytest
from admin_data import PASSWORD, make_user, messages_text
from browser_support import log_in, screenshot, sync_api
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connections
from django.utils import timezone
from helpers import schedule_looks as looks
from helpers import wait_until

from django_pgjobs import job, schedules
from django_pgjobs.models import Job, Schedule, ScheduleFire
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/django_pgjobs/schedule/"
RECORD = demo.record.name


def every_minute(**fields) -> Schedule:
    fields.setdefault("args", ["scheduled"])
    fields.setdefault("job_name", RECORD)
    row = Schedule(name=fields.pop("name", "report"), cron="* * * * *", **fields)
    row.next_fire_at = schedules.first_fire(row.cron, row.time_zone)
    row.save()
    return row


def act(client, action: str, *rows: Schedule):
    return client.post(
        CHANGELIST, {"action": action, "_selected_action": [row.pk for row in rows]}, follow=True
    )


def test_an_operator_adds_a_schedule_and_its_first_run_is_computed(admin_client):
    response = admin_client.post(
        f"{CHANGELIST}add/",
        {
            "name": "nightly report",
            "job_name": RECORD,
            "cron": "30  2 * * *",
            "time_zone": "Europe/Paris",
            "args": '["nightly"]',
            "kwargs": "{}",
            "catch_up": "1",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    row = Schedule.objects.get(name="nightly report")
    assert (row.cron, row.source, row.paused) == ("30 2 * * *", "admin", False)
    local = row.next_fire_at.astimezone(dt.timezone(dt.timedelta(hours=1)))
    assert (local.hour, local.minute) == (2, 30)  # Paris in November: UTC+1


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("cron", "* * *", "must have five fields"),
        ("cron", "@fortnightly", "unknown cron alias"),
        ("cron", "61 * * * *", "cron '61 * * * *'"),
        ("time_zone", "Mars/Olympus", "unknown time zone"),
        ("job_name", "os.system", "Select a valid choice"),
        ("args", '{"not": "a list"}', "A JSON array"),
        ("args", '["a", "b", "c"]', "The arguments do not fit"),
        # nested past what Python reads (json.loads raised RecursionError: a server error)
        ("args", "[" * 100_000 + "]" * 100_000, "Enter a valid JSON"),
        ("kwargs", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "Enter a valid JSON"),
    ],
)
def test_the_form_refuses_what_would_never_run(admin_client, field, value, error):
    data = {"name": "x", "job_name": RECORD, "cron": "@daily", "time_zone": "", "args": '["a"]'}
    data.update({"kwargs": "{}", "catch_up": "1", field: value})
    response = admin_client.post(f"{CHANGELIST}add/", data)
    assert response.status_code == 200
    assert error in html.unescape(response.content.decode())
    assert not Schedule.objects.exists()


def test_pause_resume_and_run_now_are_actions(admin_client):
    row = every_minute()
    assert "Paused 1 schedule." in messages_text(act(admin_client, "pause", row))
    row.refresh_from_db()
    assert row.paused

    response = act(admin_client, "run_now", row)
    (fire,) = ScheduleFire.objects.all()
    assert fire.manual and f"Ran report now: job #{fire.job_id}." in messages_text(response)
    assert Job.objects.get(pk=fire.job_id).args == ["scheduled"]
    row.refresh_from_db()
    assert row.last_job_id == fire.job_id and row.paused

    # resumed: from the next fire time on, the times of the pause are not caught up
    Schedule.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - dt.timedelta(hours=1))
    assert "Resumed 1 schedule." in messages_text(act(admin_client, "resume", row))
    row.refresh_from_db()
    assert not row.paused and row.next_fire_at > timezone.now()

    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert f"job #{fire.job_id}: ready" in page and "(run now)" in page


@pytest.mark.parametrize("action", ["run_now", "pause", "resume"])
def test_an_action_on_a_schedule_deleted_since_the_list_was_shown_says_so(admin_client, action):
    """The list was shown, then another admin deleted a selected schedule: the action does the
    rest and says what it could not do (run now said nothing at all)."""
    kept, gone = every_minute(name="kept"), every_minute(name="gone")
    Schedule.objects.filter(pk__in=[kept.pk, gone.pk]).update(paused=action == "resume")
    Schedule.objects.filter(pk=gone.pk).delete()
    response = act(admin_client, action, kept, gone)
    assert response.status_code == 200
    said = messages_text(response)
    assert (
        "1 selected schedule no longer exists (deleted since the list was shown): nothing was "
        "done for it." in said
    ), said
    if action == "run_now":
        (fire,) = ScheduleFire.objects.all()
        assert fire.schedule_id == kept.pk and f"Ran kept now: job #{fire.job_id}." in said
    else:
        assert Schedule.objects.get().paused == (action == "pause")
        assert f"{action.title()}d 1 schedule." in said


def waiting_on_a_schedule_lock(conn) -> bool:
    conn.execute("SELECT pg_stat_clear_snapshot()")  # else the transaction's first snapshot
    return (
        conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%pgjobs_schedule%'"
        ).fetchone()[0]
        == 1
    )


def test_run_now_of_a_schedule_deleted_while_it_fires_says_so(admin_client, other_connection):
    """Deleted after the action read it: the fire waits for the delete's lock, then finds no
    row and enqueues nothing. It was a server error (500)."""
    row = every_minute(name="racing")
    sent: list = []

    def run_now() -> None:
        try:
            sent.append(act(admin_client, "run_now", row))
        except Exception as error:  # the test client re-raises a view's exception
            sent.append(error)
        finally:
            connections.close_all()

    with other_connection.transaction():  # another admin's delete, committed once the fire waits
        other_connection.execute("DELETE FROM pgjobs_schedule WHERE id = %s", (row.pk,))
        thread = threading.Thread(target=run_now)
        thread.start()
        wait_until(lambda: waiting_on_a_schedule_lock(other_connection), timeout=30, interval=0.01)
    thread.join(30)
    (response,) = sent
    assert not isinstance(response, Exception), response
    assert messages_text(response) == ["racing: not run, it no longer exists (deleted meanwhile)."]
    assert not ScheduleFire.objects.exists() and not Job.objects.exists()


def test_a_schedule_declared_in_code_keeps_its_definition_from_the_code(admin_client):
    row = every_minute(source="code")
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert 'name="cron"' not in page and 'name="paused"' in page


def test_a_schedule_declared_in_code_cannot_be_renamed(admin_client):
    """Its row is found by its job's name at each worker start: renamed, a second row would be
    written and every fire time would run twice."""
    row = every_minute(name=RECORD, source="code")
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert 'name="name"' not in page
    admin_client.post(f"{CHANGELIST}{row.pk}/change/", {"name": "renamed", "paused": "on"})
    assert Schedule.objects.get(pk=row.pk).name == RECORD


def test_the_schedule_pages_need_staff_and_the_model_permissions(client):
    row = every_minute()
    viewer = make_user("schedule viewer", perms=("view_schedule",))
    staff = make_user("staff only")
    client.force_login(staff)
    assert client.get(CHANGELIST).status_code == 403

    client.force_login(viewer)  # view_schedule only
    assert client.get(CHANGELIST).status_code == 200
    for action in ("run_now", "pause"):
        act(client, action, row)  # not offered: "No action selected"
    assert not ScheduleFire.objects.exists() and not Schedule.objects.get().paused
    assert client.post(f"{CHANGELIST}{row.pk}/change/", {"name": "x"}).status_code == 403
    assert client.get(f"{CHANGELIST}add/").status_code == 403

    client.force_login(make_user("operator", perms=("view_schedule", "change_schedule")))
    act(client, "run_now", row)
    assert ScheduleFire.objects.count() == 1


def test_run_now_needs_a_post_with_a_csrf_token(superuser):
    from django.test import Client

    row = every_minute()
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    response = client.post(CHANGELIST, {"action": "run_now", "_selected_action": [row.pk]})
    assert response.status_code == 403
    assert not ScheduleFire.objects.exists()


def test_a_code_schedule_whose_job_lost_its_cron_is_reported_by_the_check_and_admin(
    admin_client,
):
    every_minute(name=RECORD, source="code")  # demo.record declares no cron= (any more)
    every_minute(name="added here")  # an admin schedule of a job without cron=: fine
    (warning,) = [m for m in run_checks(databases=["default"]) if m.id == "pgjobs.W003"]
    assert repr(RECORD) in warning.msg and "no longer declares cron=" in warning.msg
    page = admin_client.get(CHANGELIST).content.decode()
    assert page.count("(no longer declares cron=: fires nothing)") == 1


def test_a_schedule_whose_arguments_do_not_fit_is_reported_by_the_check_and_admin(admin_client):
    every_minute(name="stale", args=["a", "b", "c", "d"], kwargs={"gone": 1})
    every_minute(name="fine")
    (warning,) = [m for m in run_checks(databases=["default"]) if m.id == "pgjobs.W004"]
    assert "'stale' has arguments that do not fit" in warning.msg
    page = html.unescape(admin_client.get(CHANGELIST).content.decode())
    assert page.count("(arguments do not fit: ") == 1


def test_a_schedule_whose_job_is_gone_is_reported_by_the_check_and_the_admin(admin_client):
    every_minute(name="kept")
    every_minute(name="orphan")
    Schedule.objects.filter(name="orphan").update(job_name="myapp.jobs.removed_last_release")

    messages = run_checks(databases=["default"])
    (warning,) = [m for m in messages if m.id == "pgjobs.W002"]
    assert "'orphan'" in warning.msg and "myapp.jobs.removed_last_release" in warning.msg
    assert not [m for m in run_checks() if m.id == "pgjobs.W002"]  # a database check only

    page = admin_client.get(CHANGELIST).content.decode()
    assert "myapp.jobs.removed_last_release (job not registered: fires nothing)" in page
    assert Schedule.objects.filter(name="orphan").exists()  # never dropped
    orphan = Schedule.objects.get(name="orphan")
    response = act(admin_client, "run_now", orphan)
    assert "orphan: job myapp.jobs.removed_last_release is not registered." in messages_text(
        response
    )
    assert not ScheduleFire.objects.exists()
    call_command("check", "--database", "default", "--fail-level", "ERROR")


# -- values of PGJOBS["REDACT_KEYS"] (the test project masks password and token) -----------------

SECRETS = ("hunter2-password", "tok-3f9a7c1d")


@job(unique_key=lambda user, password, options=None: {}[password])  # quotes it in its error
def sign_in(user: str, password: str, options: dict | None = None) -> None:
    pass


def secret_schedule(**fields) -> Schedule:
    return every_minute(
        job_name=sign_in.name,
        args=["ann", SECRETS[0]],  # positional: masked by its parameter's name
        kwargs={"options": {"token": SECRETS[1], "lang": "en"}},
        **fields,
    )


@pytest.mark.parametrize(
    "perms", [("view_schedule",), ("view_schedule", "change_schedule"), "superuser"]
)
def test_the_schedule_pages_mask_the_values_the_job_pages_mask(client, perms):
    added, declared = secret_schedule(name="added"), secret_schedule(name="code", source="code")
    if perms == "superuser":
        user = make_user("root")
        user.is_superuser = True
        user.save()
    else:
        user = make_user("someone", perms=perms)
    client.force_login(user)
    listing = client.get(CHANGELIST)
    assert (
        "its unique_key function raised KeyError: &#x27;********&#x27;" in listing.content.decode()
    )
    pages = [listing] + [client.get(f"{CHANGELIST}{r.pk}/change/") for r in (added, declared)]
    for response in pages:
        assert response.status_code == 200
        content = html.unescape(response.content.decode())
        assert all(secret not in content for secret in SECRETS), response.request
    for response in pages[1:]:
        content = html.unescape(response.content.decode())
        assert '"********"' in content and '"lang": "en"' in content and '"ann"' in content
        assert 'name="args"' not in content and 'name="kwargs"' not in content


def test_a_schedule_holding_masked_values_keeps_them_when_its_other_fields_are_saved(
    admin_client,
):
    row = secret_schedule(name="nightly")
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert 'name="cron"' in page and "Not editable here" in page
    data = {"name": "nightly", "job_name": sign_in.name, "cron": "@daily", "time_zone": ""}
    response = admin_client.post(f"{CHANGELIST}{row.pk}/change/", {**data, "catch_up": "1"})
    assert response.status_code == 302, response.content.decode()[:3000]
    row.refresh_from_db()
    assert (row.cron, row.args) == ("@daily", ["ann", SECRETS[0]])
    assert row.kwargs == {"options": {"token": SECRETS[1], "lang": "en"}}
    plain = every_minute(name="plain")  # nothing to mask: edited in the form as before
    assert 'name="args"' in admin_client.get(f"{CHANGELIST}{plain.pk}/change/").content.decode()


def test_no_filter_from_the_url_reads_inside_a_schedules_arguments(client):
    """Counting the rows of ``?kwargs__options__token__startswith=t`` would tell a masked value
    a character at a time: refused (400), as on the job pages."""
    secret_schedule(name="nightly")
    client.force_login(make_user("viewer", perms=("view_schedule",)))
    for lookup in [
        {"kwargs__options__token__startswith": SECRETS[1][:3]},
        {"args__1__startswith": "h"},
        {"args__contains": SECRETS[0]},
        {"kwargs__has_key": "options"},
        {"kwargs": "{}"},
    ]:
        assert client.get(CHANGELIST, lookup).status_code == 400, lookup
    assert client.get(CHANGELIST, {"paused__exact": "0"}).context["cl"].result_count == 1


def test_pause_and_run_now_in_a_browser_with_a_worker_running(
    live_server, browser_page, django_user_model, start_worker
):
    row = every_minute(name="hourly report", args=["run from the admin"])
    # not due before the test makes it so: a minute boundary crossed before the pause (a slow
    # log-in) would fire it for real
    Schedule.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() + dt.timedelta(hours=1))
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    worker = start_worker("-v", "2")
    page, expect = browser_page, sync_api.expect

    log_in(page, live_server.url, CHANGELIST)
    expect(page.locator("#result_list")).to_contain_text("hourly report")
    page.locator("input[name=_selected_action]").first.check()
    page.select_option("select[name=action]", "pause")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Paused 1 schedule.")
    expect(page.locator("#result_list")).to_contain_text("paused")

    # due now, but paused: the worker's next look (logged at -v 2) fires nothing
    due = timezone.now() - dt.timedelta(seconds=5)
    Schedule.objects.filter(pk=row.pk).update(next_fire_at=due)
    wait_until(lambda: any(t > due + dt.timedelta(seconds=6) for t, *_ in looks(worker)))
    assert not ScheduleFire.objects.exists()

    page.locator("input[name=_selected_action]").first.check()
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Ran hourly report now: job #")
    wait_until(lambda: Execution.objects.filter(label="run from the admin").exists())
    (fire,) = ScheduleFire.objects.all()
    assert fire.manual

    page.click("#result_list a:has-text('hourly report')")
    expect(page.locator(".field-recent_fires")).to_contain_text(f"job #{fire.job_id}: finished")
    screenshot(page, "schedule.png")
