"""The repair bench of the dead letters (docs/howto/repair.md): edit a dead letter's arguments
and requeue it. Checked before anything is written, as ``enqueue()`` checks; one statement moves
it back as a new job linked to the dead letter, with who changed what in its audit trail."""

from __future__ import annotations

import html
import json

import pytest
from admin_data import PASSWORD, dead_letter, make_user, messages_text, viewer_perms
from django.test import Client

from django_pgjobs import db
from django_pgjobs.models import DeadLetter, Job
from testproject.handlers import unique

pytestmark = pytest.mark.django_db(transaction=True)

ADD_POINTS = "testproject.handlers.basics.add_points"


def edit_url(pk: int) -> str:
    return f"/admin/django_pgjobs/deadletter/{pk}/edit/"


def logged_in(username: str, perms: tuple[str, ...] = (), **client_options) -> Client:
    make_user(username, perms=perms)
    client = Client(**client_options)
    assert client.login(username=username, password=PASSWORD)
    return client


@pytest.fixture
def operator() -> Client:
    return logged_in("fixer", (*viewer_perms(), "change_deadletter"))


@pytest.fixture
def broken():
    return dead_letter(name=ADD_POINTS, queue="handlers", args=["score"], kwargs={"point": 1})


def test_the_form_shows_the_arguments_and_the_signature(operator, broken):
    page = operator.get(edit_url(broken.pk)).content.decode()
    assert "add_points(counter: str, points: int)" in page
    assert "&quot;point&quot;: 1" in page  # the stored kwargs, as JSON


@pytest.mark.parametrize(
    ("args", "kwargs", "reason"),
    [
        ('["score"]', '{"point": 1}', "missing a required argument: 'points'"),
        ('["score", 1]', '{"point": 1}', "got an unexpected keyword argument 'point'"),
        ('["score", 1, 2]', "{}", "too many positional arguments"),
        ('["score"', "{}", "args is not valid JSON"),
        ('{"counter": "score"}', "{}", "args must be a JSON array"),
        ('["score", NaN]', "{}", "JSON has no NaN"),
    ],
)
def test_an_edit_that_enqueue_would_refuse_writes_nothing(operator, broken, args, kwargs, reason):
    response = operator.post(edit_url(broken.pk), {"args": args, "kwargs": kwargs})
    assert response.status_code == 200
    assert reason in html.unescape(response.content.decode())
    assert DeadLetter.objects.filter(pk=broken.pk).exists()
    assert not Job.objects.exists()


def test_a_payload_over_the_limit_is_refused(operator, broken, settings):
    settings.PGJOBS = {**getattr(settings, "PGJOBS", {}), "MAX_PAYLOAD_BYTES": 100}
    response = operator.post(edit_url(broken.pk), {"args": json.dumps(["x" * 200, 1])})
    assert "MAX_PAYLOAD_BYTES" in response.content.decode()
    assert not Job.objects.exists()


def test_a_valid_edit_requeues_a_new_job_linked_to_the_dead_letter(operator, broken):
    response = operator.post(edit_url(broken.pk), {"args": '["score"]', "kwargs": '{"points": 7}'})
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/admin/django_pgjobs/job/{job.pk}/change/"
    assert not DeadLetter.objects.filter(pk=broken.pk).exists()
    assert (job.args, job.kwargs, job.attempts, job.queue) == (
        ["score"],
        {"points": 7},
        0,
        "handlers",
    )
    assert job.replayed_from == broken.pk
    assert job.errors == broken.errors  # the history stays with it
    [entry] = job.repairs
    assert entry["by"] == "admin user 'fixer'"
    assert (entry["args_before"], entry["kwargs_before"]) == (["score"], {"point": 1})
    assert (entry["args"], entry["kwargs"]) == (["score"], {"points": 7})
    assert (entry["dead_letter"], entry["job_id"]) == (broken.pk, broken.job_id)
    page = operator.get(f"/admin/django_pgjobs/job/{job.pk}/change/").content.decode()
    assert "Requeued from dead letter #" in page and "admin user &#x27;fixer&#x27;" in page


def test_the_trail_follows_the_job_back_to_the_dead_letters(operator, broken):
    operator.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(status="running", attempts=1, claim_token=None)
    token = "00000000-0000-0000-0000-000000000001"
    Job.objects.filter(pk=job.pk).update(claim_token=token)
    error = {"type": "ValueError", "message": "again"}
    params = {"id": job.pk, "token": token, "reason": "again", "error_type": "ValueError"}
    db.execute(db.jobs_connection(), "dead_letter_job", {**params, "error": json.dumps([error])})
    again = DeadLetter.objects.get()
    assert again.replayed_from == broken.pk
    assert again.repairs == job.repairs
    page = operator.get(f"/admin/django_pgjobs/deadletter/{again.pk}/change/").content.decode()
    assert "Requeued from dead letter #" in page and "edit and requeue" in page


def test_a_dead_letter_requeued_meanwhile_is_reported_not_duplicated(operator, broken):
    DeadLetter.objects.filter(pk=broken.pk).delete()
    response = operator.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    assert response.status_code == 404
    assert not Job.objects.exists()


def test_only_staff_with_the_change_permission_may_edit(broken):
    viewer = logged_in("viewer", viewer_perms())
    assert viewer.get(edit_url(broken.pk)).status_code == 403
    assert viewer.post(edit_url(broken.pk), {"args": '["score", 7]'}).status_code == 403
    anonymous = Client().post(edit_url(broken.pk), {"args": '["score", 7]'})
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    assert not Job.objects.exists()


def test_a_change_needs_csrf(broken):
    client = logged_in("fixer", (*viewer_perms(), "change_deadletter"), enforce_csrf_checks=True)
    response = client.post(edit_url(broken.pk), {"args": '["score", 7]', "kwargs": "{}"})
    assert response.status_code == 403
    assert not Job.objects.exists()


def test_arguments_the_admin_redacts_are_not_offered_for_editing(operator, settings):
    settings.PGJOBS = {**getattr(settings, "PGJOBS", {}), "REDACT_KEYS": ["points"]}
    secret = dead_letter(name=ADD_POINTS, queue="handlers", args=["s"], kwargs={"points": 1})
    response = operator.get(edit_url(secret.pk))
    assert response.status_code == 302
    assert any("cannot be edited here" in text for text in messages_text(response))


def test_an_edited_job_takes_the_payload_version_its_arguments_were_checked_against(operator):
    old = dead_letter(
        name="testproject.handlers.versions.award_points", queue="handlers", args=["s", 1]
    )
    assert old.version == 1
    operator.post(edit_url(old.pk), {"args": '["s"]', "kwargs": '{"amount": 3}'})
    assert Job.objects.get().version == 2  # not upgraded again: it fits version 2 already


def test_an_edit_gives_the_job_the_unique_key_of_its_new_arguments(operator):
    """The key came from the job's unique_key function: edited from report 7 to 8, the job
    holds report 8's key (it held report 7's, and a second refresh of report 8 got in)."""
    old = dead_letter(
        name=unique.refresh_report.name, queue="unique", args=[7], unique_key="report:7"
    )
    operator.post(edit_url(old.pk), {"args": "[8]", "kwargs": "{}"})
    assert Job.objects.get().unique_key == "report:8"
    unique.refresh_report.enqueue(8)  # in flight already: no second job
    assert Job.objects.count() == 1


def test_an_edit_keeps_a_unique_key_given_at_the_call(operator):
    old = dead_letter(
        name=unique.refresh_report.name, queue="unique", args=[7], unique_key="nightly"
    )
    operator.post(edit_url(old.pk), {"args": "[8]", "kwargs": "{}"})
    assert Job.objects.get().unique_key == "nightly"


def test_an_edited_job_of_the_scope_waiting_holds_its_key_again(operator):
    """As a plain requeue does: the job waits holding its key, so a second one is not added;
    while a waiting job holds it, the dead letter stays (reported, not duplicated)."""
    old = dead_letter(name=unique.refresh_prices.name, queue="unique", waiting_key="refresh-prices")
    operator.post(edit_url(old.pk), {"args": "[]", "kwargs": '{"hold": ""}'})
    (requeued,) = Job.objects.all()
    assert (requeued.waiting_key, requeued.kept_waiting_key) == ("refresh-prices",) * 2
    unique.refresh_prices.enqueue()
    assert Job.objects.count() == 1
    again = dead_letter(
        name=unique.refresh_prices.name, queue="unique", waiting_key="refresh-prices"
    )
    operator.post(edit_url(again.pk), {"args": "[]", "kwargs": "{}"})
    assert DeadLetter.objects.filter(pk=again.pk).exists() and Job.objects.count() == 1
