"""Every admin page renders what an operator needs, escapes what rows carry, and stays bounded."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from admin_data import dead_letter, error, job, seed
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db import connection, connections
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_pgjobs import job as django_pgjobs_job
from django_pgjobs import overview
from django_pgjobs.admin import base as admin_base
from django_pgjobs.models import DeadLetter, Job, QueueState, Worker
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pgjobs_job_changelist")
DEAD = reverse("admin:django_pgjobs_deadletter_changelist")
DASHBOARD = reverse("admin:django_pgjobs_job_dashboard")
SUMMARY = reverse("admin:django_pgjobs_deadletter_summary")
XSS = "<script>alert('pwned')</script>"
XSS_ESCAPED = "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;"
PGJOBS_TABLE = re.compile(r"\bpgjobs_(job|deadletter|worker|queue|stat)\b")


@pytest.fixture
def rows():
    return seed()


def text(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_dashboard_shows_each_queue_with_counts_waits_and_workers(admin_client, rows):
    page = text(admin_client.get(DASHBOARD))
    for queue in ("emails", "default", "payments"):
        assert f'id="queue-{queue}"' in page
    emails = page.split('id="queue-emails"')[1].split("</tr>")[0]
    assert "view=due" in emails and ">12<" in emails  # twelve due emails
    payments = page.split('id="queue-payments"')[1].split("</tr>")[0]
    assert "pgjobs-expired" in payments  # the stuck job's lease is past expiry
    assert "wait p95" in page and "failure rate" in page and "done/min" in page
    assert "<svg" in page and "<rect" in page  # the throughput chart, no JavaScript
    assert "web-1" in page and "web-2" in page and "silent" in page  # web-2 stopped beating
    assert "Pause" in page  # the superuser may pause


def test_dashboard_without_anything_says_so(admin_client):
    page = text(admin_client.get(DASHBOARD))
    assert "No queue has jobs" in page and "No worker is running" in page


def test_job_list_columns(admin_client, rows):
    page = text(admin_client.get(JOBS + "?view=retrying"))
    assert f"#{rows['retrying'].pk}" in page
    assert "2/4" in page  # attempts/max
    assert "ConnectionError: payment gateway timed out" in page  # last error summary
    assert "in 4" in page or "in 3" in page or "in 45 s" in page  # due time, relative
    running = text(admin_client.get(JOBS + "?view=running"))
    assert "web-1:4242:a1b2c3d4" in running and "lease until" in running
    assert "lease expired" in running  # the stuck one
    assert at(running, rows["stuck"].pk) < at(running, rows["running"].pk)


def at(page: str, pk: int) -> int:
    """Where job ``pk``'s ``#pk`` first shows on ``page``: not inside a colour such as the
    admin's ``#79aec8`` (a job numbered 79 once matched it)."""
    found = re.search(rf"#{pk}(?![0-9a-fA-F])", page)
    assert found, f"#{pk} not on the page"
    return found.start()


@pytest.mark.parametrize(
    "query, expected",
    [
        ("view=due", 12),
        ("view=scheduled", 5),
        ("view=retrying", 1),
        ("view=running", 2),
        ("view=lease_expired", 1),
        ("queue=payments", 3),
        ("name=testproject.demo.jobs.flaky", 1),
        ("queue=emails&view=due", 12),
        ("q=flaky", 1),
        ("q=testproject.demo.jobs.send_welcome_email", 12),
    ],
)
def test_job_filters_and_search(admin_client, rows, query, expected):
    response = admin_client.get(f"{JOBS}?{query}")
    assert response.status_code == 200
    assert response.context["cl"].result_count == expected


def test_job_search_by_id_and_unique_key(admin_client, rows):
    keyed = job(unique_key="invoice:77", args=[1])
    for term in (str(keyed.pk), f"%23{keyed.pk}", "invoice:77"):
        response = admin_client.get(f"{JOBS}?q={term}")
        assert [j.pk for j in response.context["cl"].result_list] == [keyed.pk]


def test_job_detail_shows_arguments_every_error_and_timeline(admin_client, rows):
    retrying = rows["retrying"]
    page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[retrying.pk])))
    assert "charge-42" in page and "fail_times" in page
    assert page.count('class="pgjobs-error"') == 2
    assert page.count("Traceback (most recent call last)") == 2
    assert "attempt 1 failed" in page and "attempt 2 failed" in page and "retry due" in page
    assert ">Retry now<" in page and ">Cancel job<" in page
    assert ">Run now<" not in page  # not scheduled


def test_job_detail_offers_only_valid_actions(admin_client, rows):
    def buttons(pk):
        page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[pk])))
        labels = ("Run now", "Retry now", "Cancel job", "Abort")
        return {label for label in labels if f">{label}<" in page}

    assert buttons(rows["scheduled"].pk) == {"Run now", "Cancel job"}
    assert buttons(rows["retrying"].pk) == {"Retry now", "Cancel job"}
    assert buttons(rows["running"].pk) == {"Abort"}
    due = Job.objects.filter(queue="emails").first()
    assert buttons(due.pk) == {"Cancel job"}


def test_list_actions_follow_the_view_filter(admin_client, rows):
    def offered(query):
        form = admin_client.get(f"{JOBS}?{query}").context["action_form"]
        if form is None:  # no action at all: Django shows no action menu
            return set()
        return {name for name, _ in form.fields["action"].choices if name}

    assert offered("") == {"run_now", "retry_now", "cancel", "abort"}
    assert offered("view=scheduled") == {"run_now", "cancel"}
    assert offered("view=retrying") == {"retry_now", "cancel"}
    assert offered("view=due") == {"cancel"}
    assert offered("view=running") == {"abort"}


def test_arguments_are_redacted(admin_client, rows):
    page = text(
        admin_client.get(reverse("admin:django_pgjobs_job_change", args=[rows["scheduled"].pk]))
    )
    assert "hunter2" not in page
    assert "********" in page
    nested = job(kwargs={"auth": {"Token": "s3cr3t", "user": "ann"}, "items": [{"password": "p"}]})
    page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[nested.pk])))
    assert "s3cr3t" not in page and '"p"' not in page and "ann" in page


def test_markup_in_rows_renders_as_text(admin_client):
    hostile = job(
        name=f"evil.{XSS}",
        queue="default",
        args=[XSS],
        kwargs={XSS: XSS},
        attempts=1,
        errors=[{**error(1, XSS, XSS, "x", 1), "traceback": XSS, "worker": XSS}],
    )
    dead = dead_letter(
        name=XSS, error_type=XSS, reason=XSS, args=[XSS], errors=[error(1, XSS, XSS, "x", 1)]
    )
    pages = [
        admin_client.get(JOBS),
        admin_client.get(JOBS + "?view=retrying"),
        admin_client.get(reverse("admin:django_pgjobs_job_change", args=[hostile.pk])),
        admin_client.get(DEAD),
        admin_client.get(reverse("admin:django_pgjobs_deadletter_change", args=[dead.pk])),
        admin_client.get(SUMMARY),
        admin_client.get(DASHBOARD),
    ]
    for response in pages:
        page = text(response)
        assert XSS not in page
    assert XSS_ESCAPED in text(pages[2])
    assert XSS_ESCAPED in text(pages[4])


def test_dead_letter_list_filters_and_search(admin_client, rows):
    def count(query):
        return admin_client.get(f"{DEAD}?{query}").context["cl"].result_count

    assert count("") == 9
    assert count("error_type=ConnectionError") == 3
    assert count("name=testproject.demo.jobs.always_fails") == 3
    assert count("queue=payments") == 3
    assert count("within=1h") == 3  # the three ValueErrors died minutes ago
    assert count("within=24h") == 6
    assert count("within=7d") == 8  # the last UnknownJob died 180 h ago
    assert count("q=UnknownJob") == 3
    first = rows["dead"][0]
    assert count(f"q={first.job_id}") >= 1
    page = text(admin_client.get(DEAD))
    assert "ValueError" in page and "attempts exhausted (3/3)" in page


def test_dead_letter_detail(admin_client, rows):
    dead = rows["dead"][1]
    page = text(admin_client.get(reverse("admin:django_pgjobs_deadletter_change", args=[dead.pk])))
    assert page.count("Traceback (most recent call last)") == 3
    assert "dead-lettered" in page and "enqueued" in page
    assert ">Requeue<" in page and ">Delete for good<" in page
    assert "gateway unreachable" in page


def test_dead_letter_summary_groups_with_1h_24h_7d_counts(admin_client, rows):
    response = admin_client.get(SUMMARY)
    page = text(response)
    by_type = dict(response.context["by_type"])
    assert by_type["ValueError"] == [3, 3, 3]
    assert by_type["ConnectionError"] == [0, 3, 3]  # 5 h, 10 h, 15 h ago
    assert by_type["UnknownJob"] == [0, 0, 2]  # 60 h, 120 h ago (180 h is past 7 d)
    by_name = dict(response.context["by_name"])
    assert by_name["testproject.demo.jobs.flaky"] == [0, 3, 3]
    assert "error_type=ValueError" in page and "latest reason" in page


def test_workers_and_queues_pages(admin_client, rows):
    page = text(admin_client.get(reverse("admin:django_pgjobs_worker_changelist")))
    assert "web-1" in page and "payments" in page
    page = text(admin_client.get(reverse("admin:django_pgjobs_queuestate_changelist")))
    assert "payments" in page
    page = text(admin_client.get(reverse("admin:app_list", args=["django_pgjobs"])))
    assert "Dead letters" in page and f'href="{DASHBOARD}"' in page


def test_lists_count_at_most_the_cap(admin_client, monkeypatch):
    monkeypatch.setattr(admin_base.CappedPaginator, "cap", 5)
    monkeypatch.setattr(admin_base, "COUNT_CAP", 5)
    for i in range(8):
        job(args=[i])
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(JOBS)
    page = text(response)
    assert "more than 5 jobs" in page
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 6" in sql for sql in counts), counts


def test_pages_use_a_bounded_number_of_queries(admin_client, rows):
    for url in (DASHBOARD, JOBS, JOBS + "?view=retrying", DEAD, SUMMARY):
        with CaptureQueriesContext(connection) as queries:
            text(admin_client.get(url))
        assert len(queries) <= 15, (url, len(queries))


def test_get_never_changes_anything(admin_client, rows):
    before = (
        sorted(Job.objects.values_list("id", "status", "run_after")),
        sorted(DeadLetter.objects.values_list("id", flat=True)),
    )
    scheduled, dead = rows["scheduled"], rows["dead"][0]
    for url in (
        reverse("admin:django_pgjobs_job_act", args=[scheduled.pk, "run_now"]),
        reverse("admin:django_pgjobs_job_act", args=[scheduled.pk, "cancel"]),
        reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"]),
        reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "delete"]),
        reverse("admin:django_pgjobs_queuestate_pause", args=["emails"]),
    ):
        assert admin_client.get(url).status_code == 405
    for url in (DASHBOARD, JOBS, DEAD, SUMMARY):
        admin_client.get(url + "?action=cancel&_selected_action=1")
    after = (
        sorted(Job.objects.values_list("id", "status", "run_after")),
        sorted(DeadLetter.objects.values_list("id", flat=True)),
    )
    assert before == after
    assert not Job.objects.filter(
        queue="emails", run_after__gt=timezone.now() + timedelta(days=1)
    ).exists()


def test_dashboard_on_a_big_table_estimates_due_and_scheduled_only(admin_client, rows, monkeypatch):
    monkeypatch.setattr(overview, "EXACT_COUNT_ROWS", -1)  # as if pgjobs_job held millions
    response = admin_client.get(DASHBOARD)
    page = text(response)
    assert "≈" in page and "planner" in page
    payments = {row["queue"].name: row["queue"] for row in response.context["rows"]}["payments"]
    assert payments.estimated
    assert (payments.retrying, payments.running, payments.lease_expired) == (1, 2, 1)  # exact
    emails = {row["queue"].name: row["queue"] for row in response.context["rows"]}["emails"]
    assert emails.oldest_due_seconds >= 5  # the head of the queue has waited since it was due


def test_oldest_due_is_the_oldest_waiting_job_whatever_its_priority(admin_client):
    """Workers claim by priority first: a low-priority job due an hour ago, starved behind a
    high-priority one due now, is what makes the queue late."""
    now = timezone.now()
    demo.record.using(queue="starved", priority=-50, run_after=now - timedelta(hours=1)).enqueue(
        "old"
    )
    demo.record.using(queue="starved", priority=90).enqueue("new")
    demo.record.using(queue="starved", run_after=now + timedelta(hours=1)).enqueue("later")
    overviews, _ = overview.queue_overview(connection)
    (starved,) = [q for q in overviews if q.name == "starved"]
    assert 3590 <= starved.oldest_due_seconds <= 3700, starved.oldest_due_seconds
    rows = {row["queue"].name: row for row in admin_client.get(DASHBOARD).context["rows"]}
    assert rows["starved"]["oldest_due"] == "1 h"


def test_lists_never_offer_facet_counts(admin_client, rows):
    for url in (JOBS, DEAD):
        response = admin_client.get(url + "?_facets=1")
        assert "Show counts" not in text(response)
        assert not response.context["cl"].add_facets


@django_pgjobs_job(name="tests.admin.sign_in")
def sign_in(user: str, password: str, remember: bool = False) -> None:
    """A job whose second positional argument is a secret by its parameter's name."""


def test_positional_arguments_are_redacted_by_parameter_name(admin_client):
    row = job(name="tests.admin.sign_in", args=["ann", "s3cr3t-pw", True])
    page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[row.pk])))
    assert "s3cr3t-pw" not in page and "ann" in page and "********" in page


def test_worker_and_queue_pages_show_no_job_timeline_or_errors(admin_client, rows):
    worker = text(
        admin_client.get(
            reverse("admin:django_pgjobs_worker_change", args=[quote("web-2:977:e5f6a7b8")])
        )
    )
    assert "web-2" in worker and "977" in worker
    queue = text(
        admin_client.get(reverse("admin:django_pgjobs_queuestate_change", args=["payments"]))
    )
    assert "payments" in queue
    for page in (worker, queue):
        assert "pgjobs-timeline" not in page and "pgjobs-errors" not in page
        assert "Timeline" not in page and "Errors (" not in page
    job_page = text(
        admin_client.get(reverse("admin:django_pgjobs_job_change", args=[rows["retrying"].pk]))
    )
    assert 'id="pgjobs-timeline"' in job_page and "Errors (2, newest first)" in job_page


def test_paging_stops_at_the_cap(admin_client, monkeypatch):
    monkeypatch.setattr(admin_base.CappedPaginator, "cap", 4)
    monkeypatch.setattr(admin.site._registry[Job], "list_per_page", 2)
    for i in range(5):
        job(args=[i])
    paginator = admin_base.CappedPaginator(Job.objects.order_by("id"), 2)
    assert (paginator.count, paginator.capped, paginator.num_pages) == (4, True, 2)
    response = admin_client.get(JOBS)
    assert list(response.context["cl"].paginator.page_range) == [1, 2]
    assert "more than 4 jobs" in text(response)
    assert [j.args for j in admin_client.get(JOBS + "?p=2").context["cl"].result_list] == [[2], [1]]
    assert admin_client.get(JOBS + "?p=3")["Location"].endswith("?e=1")  # past the cap


def test_dashboard_counts_dead_letters_up_to_the_cap_and_the_last_hour_exactly(
    admin_client, monkeypatch
):
    monkeypatch.setattr(overview, "COUNT_CAP", 3)
    now = timezone.now()
    for minutes in (0, 10, 20, 30, 90):
        dead_letter(queue="imports", failed_at=now - timedelta(minutes=minutes))
    dead_letter(queue="exports", failed_at=now - timedelta(hours=5))
    response = admin_client.get(DASHBOARD)
    queues = {row["queue"].name: row["queue"] for row in response.context["rows"]}
    imports, exports = queues["imports"], queues["exports"]
    assert (
        imports.dead_letters,
        imports.dead_letters_capped,
        imports.dead_letters_last_hour,
    ) == (3, True, 4)
    assert (
        exports.dead_letters,
        exports.dead_letters_capped,
        exports.dead_letters_last_hour,
    ) == (1, False, 0)
    page = text(response)
    assert ">3+</a>" in page.split('id="queue-imports"')[1].split("</tr>")[0]
    assert ">4+</b><span>dead letters" in page  # the total: some queue has more


@pytest.fixture
def jobs_database(transactional_db, settings):
    """``PGJOBS["DATABASE"]`` naming a second connection to the test database, for one test (a
    connection made at run time, as Django's test cases allow, not an alias of DATABASES)."""
    alias = "pgjobs_elsewhere"
    default = connections["default"]
    connections[alias] = type(default)(dict(default.settings_dict), alias)
    settings.PGJOBS = {**settings.PGJOBS, "DATABASE": alias}
    yield alias
    connections[alias].close()
    del connections[alias]


def test_every_admin_query_runs_on_the_jobs_database(
    admin_client,
    superuser,
    rows,
    jobs_database,
):
    request = RequestFactory().get(JOBS)
    request.user = superuser
    for model in (Job, DeadLetter, Worker, QueueState):
        assert admin.site._registry[model].get_queryset(request).db == jobs_database
    job_admin = admin.site._registry[Job]
    assert job_admin.get_object(request, str(rows["retrying"].pk))._state.db == jobs_database
    keyed = job(unique_key="invoice:5")
    with (
        CaptureQueriesContext(connections[jobs_database]) as elsewhere,
        CaptureQueriesContext(connection) as default,
    ):
        for url in (
            DASHBOARD,
            JOBS,
            JOBS + "?view=retrying&queue=payments",
            JOBS + "?q=invoice:5",
            reverse("admin:django_pgjobs_job_change", args=[rows["retrying"].pk]),
            DEAD,
            reverse("admin:django_pgjobs_deadletter_change", args=[rows["dead"][0].pk]),
            SUMMARY,
            reverse("admin:django_pgjobs_worker_changelist"),
            reverse("admin:django_pgjobs_worker_change", args=[quote("web-1:4242:a1b2c3d4")]),
            reverse("admin:django_pgjobs_queuestate_changelist"),
        ):
            text(admin_client.get(url))
        admin_client.post(
            reverse("admin:django_pgjobs_job_act", args=[keyed.pk, "cancel"]), {"confirmed": "yes"}
        )
        admin_client.post(
            JOBS + "?view=scheduled",
            {"action": "run_now", "_selected_action": [rows["scheduled"].pk], "index": 0},
        )
    assert not [q["sql"] for q in default.captured_queries if PGJOBS_TABLE.search(q["sql"])]
    assert any("pgjobs_worker" in q["sql"] for q in elsewhere.captured_queries)
    assert not Job.objects.filter(pk=keyed.pk).exists()
    assert Job.objects.get(pk=rows["scheduled"].pk).view == "due"


def test_job_page_shows_the_kept_result_escaped(admin_client):
    done = job(
        status="successful", keep_result=True, result={"note": XSS, "n": 3, "token": "s3cr3t-42"}
    )
    page = admin_client.get(reverse("admin:django_pgjobs_job_change", args=[done.pk]))
    body = page.content.decode()
    assert XSS not in body
    assert "&quot;note&quot;: &quot;" + XSS_ESCAPED in body and "&quot;n&quot;: 3" in body
    assert "s3cr3t-42" not in body and "&quot;token&quot;: &quot;********&quot;" in body
    waiting = job(keep_result=True)
    page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[waiting.pk])))
    assert "kept when the job succeeds" in page
    plain = job()
    page = text(admin_client.get(reverse("admin:django_pgjobs_job_change", args=[plain.pk])))
    assert "not kept" in page


def test_job_list_shows_whether_a_result_is_kept(admin_client):
    job(status="successful", keep_result=True, result=[1])
    job(status="successful")
    page = admin_client.get(JOBS + "?view=successful").content.decode()
    assert 'alt="True"' in page and 'alt="False"' in page
