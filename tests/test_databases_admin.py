"""The admin and the operator's numbers with queues on two databases (docs/howto/databases.md,
docs/reference/admin.md): the dashboard shows both, a list shows the one its page chose
(``?_database=``, then the session), an action runs on the database of the page it was chosen
on; ``pgjobs/metrics``, ``pgjobs/health`` and ``manage.py pgjobs status`` read both."""

from __future__ import annotations

import html
import json
import re
import socket
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.utils import load_backend
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_pgjobs import enqueue_many
from django_pgjobs.models import DeadLetter, Job, QueueState
from testproject.demo import jobs as demo
from testproject.handlers.databases import build_report

BOTH = ["default", "jobs2"]
JOBS = reverse("admin:django_pgjobs_job_changelist")
DASHBOARD = reverse("admin:django_pgjobs_job_dashboard")

pytestmark = pytest.mark.django_db(databases=BOTH)


@pytest.fixture(autouse=True)
def heavy_on_jobs2(settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2"}}


def test_the_dashboard_shows_the_queues_of_both_databases(admin_client):
    build_report.using(priority=3).enqueue("2026-10")
    build_report.enqueue("2026-11")
    demo.record.enqueue("on default")

    page = admin_client.get(DASHBOARD, follow=True).content.decode()
    assert 'id="queue-jobs2-heavy"' in page and 'id="queue-default-default"' in page
    assert f"{JOBS}?queue=heavy&amp;_database=jobs2" in page  # its links stay on its database
    assert "<b>3</b><span>due</span>" in page  # the totals add both up
    # a total card links to each database's list that holds some, with its count: a list
    # shows one database, and the card alone opened the session's (the due card: 1 and 2)
    due_links = dict(
        re.findall(r'href="([^"]*view=due[^"]*)">(\w+): 1?2?</a>', page.replace("&amp;", "&"))
    )
    assert due_links == {
        f"{JOBS}?view=due&_database=default": "default",
        f"{JOBS}?view=due&_database=jobs2": "jobs2",
    }, page
    for link, alias in due_links.items():
        listed = admin_client.get(link).content.decode()
        # the queue filter lists the queues of the rows shown
        assert ("queue=heavy" in listed) == (alias == "jobs2")
        assert ("queue=default" in listed) == (alias == "default")


def test_a_dead_letters_card_leads_to_the_database_that_holds_them(admin_client):
    """Dead letters on jobs2 alone, the session on default: the card's one link names jobs2."""
    DeadLetter.objects.using("jobs2").create(
        job_id=1, name=build_report.name, queue="heavy", reason="a test", created_at=timezone.now()
    )
    admin_client.get(JOBS, {"_database": "default"})  # the session's database
    page = admin_client.get(DASHBOARD, follow=True).content.decode()
    dead = reverse("admin:django_pgjobs_deadletter_changelist")
    assert f'href="{dead}?_database=jobs2">jobs2: 1</a>' in page
    assert f'href="{dead}?_database=default"' not in page  # it holds none


def test_a_list_shows_the_database_its_page_chose(admin_client):
    """The queue filter lists the queues of the rows shown: those of the page's database."""
    report = build_report.enqueue("2026-10")
    demo.record.enqueue("on default")

    default_list = admin_client.get(JOBS, follow=True).content.decode()
    assert "queue=default" in default_list and "queue=heavy" not in default_list
    jobs2_list = admin_client.get(JOBS, {"_database": "jobs2"}).content.decode()
    assert "queue=heavy" in jobs2_list and "queue=default" not in jobs2_list
    assert '<strong aria-current="page">jobs2</strong>' in jobs2_list
    (row_link,) = re.findall(
        rf'href="(/admin/django_pgjobs/job/{report.pk}/change/[^"]*)"', jobs2_list
    )
    assert "&amp;_database=jobs2" in row_link  # its row's page keeps it
    # the session remembers it for the pages after (breadcrumbs, the sidebar): a page asked
    # for without naming its database is sent to its URL that does...
    remembered = admin_client.get(JOBS)
    assert remembered.status_code == 302 and remembered.url == f"{JOBS}?_database=jobs2"
    assert "queue=heavy" in admin_client.get(JOBS, follow=True).content.decode()
    # ...and a filter on a list keeps its database
    filtered = admin_client.get(JOBS, {"_database": "jobs2", "queue": "heavy"})
    assert filtered.status_code == 200 and f"/job/{report.pk}/change/" in filtered.content.decode()
    assert "queue=default" in admin_client.get(JOBS, {"_database": "default"}).content.decode()


def test_an_action_runs_on_the_database_of_its_page(admin_client):
    report = build_report.using(delay=3600).enqueue("later")
    record = demo.record.using(delay=3600).enqueue("later too")
    # each database numbers its own jobs: the same id on both, as happens
    Job.objects.using("default").filter(pk=record.pk).update(id=report.pk)

    admin_client.get(JOBS, {"_database": "default"})  # another tab's choice, in the session
    act = reverse("admin:django_pgjobs_job_act", args=[report.pk, "run_now"])
    response = admin_client.post(f"{act}?_database=jobs2")
    assert response.status_code == 302

    assert Job.objects.using("jobs2").get().view == "due"
    assert Job.objects.using("default").get().view == "scheduled"  # the same id, left alone
    page = admin_client.get(
        reverse("admin:django_pgjobs_job_change", args=[report.pk]), follow=True
    )
    assert '<strong aria-current="page">jobs2</strong>' in page.content.decode()
    assert "build_report" in page.content.decode()


def test_pausing_a_queue_from_the_dashboard_pauses_it_on_its_database(admin_client):
    build_report.enqueue("2026-10")
    pause = reverse("admin:django_pgjobs_queuestate_pause")
    admin_client.post(f"{pause}?_database=jobs2", {"queue": "heavy"})
    assert QueueState.objects.using("jobs2").get(name="heavy").paused
    assert not QueueState.objects.using("default").exists()


def test_the_metrics_label_each_series_with_its_database(admin_client):
    enqueue_many(build_report, [("2026-10",), ("2026-11",)])
    demo.record.enqueue("on default")
    response = admin_client.get("/pgjobs/metrics")
    assert response.status_code == 200
    due = {
        (s.labels["database"], s.labels["queue"]): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
        if s.name == "pgjobs_jobs" and s.labels["state"] == "due"
    }
    assert due == {("jobs2", "heavy"): 2, ("default", "default"): 1}


def test_health_reads_both_databases(admin_client):
    build_report.enqueue("2026-10")  # due on jobs2, and no worker serves it
    response = admin_client.get("/pgjobs/health")
    assert response.status_code == 503
    assert response.json()["queues_without_worker"] == ["heavy"]


def test_status_shows_the_queues_of_both_databases():
    build_report.enqueue("2026-10")
    demo.record.enqueue("on default")
    out = StringIO()
    call_command("pgjobs", "status", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {(q["database"], q["queue"], q["due"]) for q in data["queues"]} == {
        ("jobs2", "heavy", 1),
        ("default", "default", 1),
    }
    assert data["totals"]["due"] == 2
    text = StringIO()
    call_command("pgjobs", "status", stdout=text)
    assert text.getvalue().startswith("database")
    only = StringIO()
    call_command("pgjobs", "status", "--json", "--database", "jobs2", stdout=only)
    assert [q["queue"] for q in json.loads(only.getvalue())["queues"]] == ["heavy"]
    call_command("pgjobs", "pause", "heavy", stdout=StringIO())  # on the queue's database
    assert QueueState.objects.using("jobs2").get(name="heavy").paused


def dead_letter_on(alias: str, pk: int, name: str, args: list) -> DeadLetter:
    return DeadLetter.objects.using(alias).create(
        id=pk, job_id=pk, name=name, queue="heavy" if alias == "jobs2" else "default",
        args=args, kwargs={}, attempts=1, max_attempts=1, reason="boom",
        error_type="ValueError", errors=[], created_at=timezone.now(),
    )  # fmt: skip


def test_edit_and_requeue_edits_the_dead_letter_of_its_page_whatever_another_tab_chose(
    admin_client,
):
    """Each database numbers its own dead letters: #1 on both. The button's link names the
    page's database, so an edit opened from jobs2's #1 edits and requeues jobs2's #1."""
    dead_letter_on("jobs2", 1, build_report.name, ["2026-10"])
    dead_letter_on("default", 1, demo.record.name, ["on default"])
    page = admin_client.get(reverse("admin:django_pgjobs_deadletter_change", args=[1]), {
        "_database": "jobs2"
    }).content.decode()  # fmt: skip
    (edit,) = re.findall(r'id="pgjobs-edit" href="([^"]+)"', page)
    edit = html.unescape(edit)
    assert edit == "/admin/django_pgjobs/deadletter/1/edit/?_database=jobs2"

    admin_client.get(JOBS, {"_database": "default"})  # another tab switches
    response = admin_client.post(edit, {"args": '["2026-10-fixed"]', "kwargs": "{}"})

    assert response.status_code == 302 and response.url.endswith("?_database=jobs2")
    assert Job.objects.using("jobs2").get().args == ["2026-10-fixed"]
    assert not DeadLetter.objects.using("jobs2").exists()
    assert DeadLetter.objects.using("default").get().args == ["on default"]  # left alone
    assert not Job.objects.using("default").exists()


def test_a_list_action_posted_without_naming_its_database_does_nothing(admin_client):
    """A list reached from the sidebar is sent to its URL naming the session's database, so
    its action form posts there; a POST naming none (a page drawn before this rule, a
    hand-made form) is refused rather than run on whatever the session names by then."""
    report = build_report.using(delay=3600).enqueue("later")
    record = demo.record.using(delay=3600).enqueue("later too")
    Job.objects.using("default").filter(pk=record.pk).update(id=report.pk)

    admin_client.get(JOBS, {"_database": "jobs2"})
    page = admin_client.get(JOBS, follow=True)  # "Jobs" in the sidebar
    assert page.redirect_chain == [(f"{JOBS}?_database=jobs2", 302)]
    admin_client.get(JOBS, {"_database": "default"})  # another tab switches
    chosen = {"action": "cancel", "_selected_action": [str(report.pk)], "index": "0"}
    refused = admin_client.post(JOBS, {**chosen, "post": "yes"})

    assert refused.status_code == 400 and b"nothing was done" in refused.content
    assert Job.objects.using("jobs2").count() == Job.objects.using("default").count() == 1
    # nor is one naming a database that holds no jobs run on the session's (a renamed alias)
    for unknown in (
        admin_client.post(f"{JOBS}?_database=jobs3", {**chosen, "post": "yes"}),
        admin_client.get(f"{JOBS}?_database=jobs3"),
    ):
        assert unknown.status_code == 400 and b"No jobs database is named jobs3" in unknown.content
    # which databases there are is for those the admin lets in: others get its login page
    anonymous = Client()
    for response in (
        anonymous.get(f"{JOBS}?_database=jobs3"),
        anonymous.post(JOBS, {**chosen, "post": "yes"}),
    ):
        assert response.status_code == 302 and "/login/" in response.url, response.content
    assert Job.objects.using("jobs2").count() == Job.objects.using("default").count() == 1
    # posted to the page's own URL, as the list's form does, it runs on jobs2
    admin_client.post(f"{JOBS}?_database=jobs2", {**chosen, "post": "yes"})
    assert not Job.objects.using("jobs2").exists() and Job.objects.using("default").exists()


@pytest.fixture
def down(settings):
    """A third jobs database whose server is not there (nothing listens on its port), for the
    queue "elsewhere": a connection made here, not in DATABASES (the test database setup would
    try to reach it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens on it
    config = {**connections.settings["jobs2"], "HOST": "127.0.0.1", "PORT": port}
    connections["down"] = load_backend(config["ENGINE"]).DatabaseWrapper(config, "down")
    settings.PGJOBS = {
        **settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2", "elsewhere": "down"}
    }  # fmt: skip
    yield "down"
    connections["down"].close()
    del connections["down"]


def test_a_database_that_is_down_leaves_the_others_on_the_dashboard_and_metrics(admin_client, down):
    build_report.enqueue("2026-10")
    demo.record.enqueue("on default")

    page = admin_client.get(DASHBOARD, follow=True)
    text = html.unescape(page.content.decode())
    assert page.status_code == 200
    assert "The jobs database down cannot be read, and is left out of this page" in text
    assert 'id="queue-jobs2-heavy"' in text and 'id="queue-default-default"' in text

    metrics = admin_client.get("/pgjobs/metrics")
    assert metrics.status_code == 200
    samples = [
        s for family in text_string_to_metric_families(metrics.content.decode())
        for s in family.samples
    ]  # fmt: skip
    up = {s.labels["database"]: s.value for s in samples if s.name == "pgjobs_database_up"}
    assert up == {"default": 1, "jobs2": 1, "down": 0}
    due = {
        s.labels["database"]: s.value
        for s in samples
        if s.name == "pgjobs_jobs" and s.labels["state"] == "due"
    }
    assert due == {"jobs2": 1, "default": 1}


def test_a_page_of_a_database_that_is_down_says_so_and_links_the_others(admin_client, down):
    response = admin_client.get(JOBS, {"_database": "down"})
    text = html.unescape(response.content.decode())
    assert response.status_code == 503
    assert "The jobs database down cannot be read" in text
    assert 'href="?_database=jobs2"' in text and 'href="?_database=default"' in text
    # a page that failed is not remembered (the session is not saved with a 5xx): the next
    # page that names no database is not stuck on this one
    assert admin_client.get(JOBS, follow=True).status_code == 200
    assert admin_client.get(JOBS, {"_database": "jobs2"}).status_code == 200


def test_metrics_without_one_readable_database_answer_503(admin_client, settings, down):
    settings.PGJOBS = {**settings.PGJOBS, "DATABASE": "down", "QUEUE_DATABASES": {}}
    response = admin_client.get("/pgjobs/metrics")
    assert response.status_code == 503


def test_the_command_acts_on_the_database_of_the_queue_it_names():
    """``pgjobs list --queue heavy`` (and requeue, delete, purge with --queue) without
    --database: the queue's database, as pause and resume; it printed nothing, or "Requeued 0
    jobs.", from PGJOBS["DATABASE"]."""
    build_report.using(delay=3600).enqueue("later")
    listed = StringIO()
    call_command("pgjobs", "list", "--queue", "heavy", "--json", stdout=listed)
    assert [row["queue"] for row in json.loads(listed.getvalue())] == ["heavy"]
    purged = StringIO()
    call_command("pgjobs", "purge", "--queue", "heavy", stdout=purged)
    assert not Job.objects.using("jobs2").exists(), purged.getvalue()
