"""The admin and the operator's numbers with queues on two databases (docs/howto/databases.md,
docs/reference/admin.md): the dashboard shows both, a list shows the one its page chose
(``?_database=``, then the session), an action runs on the database of the page it was chosen
on; ``pgjobs/metrics``, ``pgjobs/health`` and ``manage.py pgjobs status`` read both."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_pgjobs import enqueue_many
from django_pgjobs.models import Job, QueueState
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

    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="queue-jobs2-heavy"' in page and 'id="queue-default-default"' in page
    assert f"{JOBS}?queue=heavy&amp;_database=jobs2" in page  # its links stay on its database
    assert "<b>3</b><span>due</span>" in page  # the totals add both up


def test_a_list_shows_the_database_its_page_chose(admin_client):
    """The queue filter lists the queues of the rows shown: those of the page's database."""
    report = build_report.enqueue("2026-10")
    demo.record.enqueue("on default")

    default_list = admin_client.get(JOBS).content.decode()
    assert "queue=default" in default_list and "queue=heavy" not in default_list
    jobs2_list = admin_client.get(JOBS, {"_database": "jobs2"}).content.decode()
    assert "queue=heavy" in jobs2_list and "queue=default" not in jobs2_list
    assert '<strong aria-current="page">jobs2</strong>' in jobs2_list
    (row_link,) = re.findall(
        rf'href="(/admin/django_pgjobs/job/{report.pk}/change/[^"]*)"', jobs2_list
    )
    assert "&amp;_database=jobs2" in row_link  # its row's page keeps it
    # the session remembers it for the pages after (breadcrumbs, the sidebar)...
    assert "queue=heavy" in admin_client.get(JOBS).content.decode()
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
    page = admin_client.get(reverse("admin:django_pgjobs_job_change", args=[report.pk]))
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
