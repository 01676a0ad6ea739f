"""Rows the admin did not write: inserted by hand (raw SQL, another service, an old version),
with any value the columns hold. Every page still answers 200, shows what is there and escapes
it; pausing a queue whose name ``enqueue()`` would refuse still works.

``admin_client`` is pytest-django's: a client logged in as a superuser."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from admin_data import superuser  # noqa: F401
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from psycopg import sql

from django_pgjobs.models import Job, QueueState

pytestmark = pytest.mark.django_db(transaction=True)

XSS = "<script>alert('pwned')</script>"
HUGE_INT = "1" + "0" * 5000  # more digits than Python converts by default (4300)
DEEP = "[" * 3000 + "]" * 3000  # deeper than Python's recursion limit

JOB_DEFAULTS = {
    "name": "testproject.demo.jobs.record",
    "queue": "default",
    "priority": 0,
    "args": "[]",
    "kwargs": "{}",
    "status": "ready",
    "attempts": 0,
    "max_attempts": 3,
    "worker": "",
    "errors": "[]",
}
DEAD_DEFAULTS = {
    "job_id": 1,
    "name": "testproject.demo.jobs.record",
    "queue": "default",
    "priority": 0,
    "args": "[]",
    "kwargs": "{}",
    "attempts": 1,
    "max_attempts": 1,
    "reason": "by hand",
    "error_type": "",
    "errors": "[]",
}
JSON_COLUMNS = {"args", "kwargs", "errors", "result", "queues"}


def insert(connection, table: str, defaults: dict, **columns) -> int | str:
    """One row written with plain SQL: JSON columns take JSON text (any JSON at all)."""
    values = {**defaults, **columns}
    names = list(values)
    placeholders = [sql.SQL("%s::jsonb" if name in JSON_COLUMNS else "%s") for name in names]
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, names)),
        sql.SQL(", ").join(placeholders),
    )
    return connection.execute(statement, [values[name] for name in names]).fetchone()[0]


def hand_job(connection, **columns) -> int:
    defaults = {**JOB_DEFAULTS, "run_after": timezone.now(), "created_at": timezone.now()}
    return insert(connection, "pgjobs_job", defaults, **columns)


def hand_dead_letter(connection, **columns) -> int:
    defaults = {**DEAD_DEFAULTS, "failed_at": timezone.now(), "created_at": timezone.now()}
    return insert(connection, "pgjobs_deadletter", defaults, **columns)


def hand_worker(connection, worker_id: str, queues: str, **columns) -> str:
    now = timezone.now()
    defaults = {
        "id": worker_id,
        "hostname": "web-9",
        "pid": 4242,
        "concurrency": 4,
        "started_at": now - timedelta(minutes=5),
        "last_seen_at": now,
    }
    return insert(connection, "pgjobs_worker", defaults, queues=queues, **columns)


def error_entries(*entries) -> str:
    return json.dumps(list(entries))


# Each case: a few rows written by hand. The name says which value they carry.
def slash_queue(c):
    hand_job(c, queue="reports/daily")
    hand_dead_letter(c, queue="reports/daily")
    c.execute("INSERT INTO pgjobs_queue (name, paused, changed_at) VALUES ('a/b', true, now())")


def awkward_queue_names(c):
    for queue in ("..", "a\nb", "x?y#z", "%2F", " spaced ", "ünï/cødé", "q" * 100):
        hand_job(c, queue=queue)
    hand_dead_letter(c, queue="")  # the dead letters' queue has no "not empty" check
    c.execute("INSERT INTO pgjobs_queue (name, paused, changed_at) VALUES ('', false, now())")


def errors_of_every_shape(c):
    shapes = [
        '"a string"',
        "42",
        "null",
        "true",
        '{"type": "ValueError", "message": "an object, not a list"}',
        '["boom", 3, null, [1, 2]]',
        error_entries({}, {"type": None}, {"message": {"nested": [1]}}),
        error_entries(
            {
                "at": "9999-12-31T23:59:59-14:00",  # past datetime.max once in UTC
                "attempt": {"a": 1},
                "type": 7,
                "message": ["x"],
                "traceback": {"not": "text"},
                "worker": 5,
            },
            {"at": "0001-01-01T00:00:00+14:00", "attempt": None},
            {"at": 1700000000, "attempt": "second"},
            {"at": "not a time", "attempt": 2**70},
        ),
    ]
    for shape in shapes:
        hand_job(c, errors=shape, attempts=1)
        hand_dead_letter(c, errors=shape)


def worker_queues_of_every_shape(c):
    for index, queues in enumerate(
        ['"emails"', "42", '{"emails": true}', "null", '[1, null, ["x"], "ok"]', "[]", "true"]
    ):
        hand_worker(c, f"hand-{index}", queues)


def json_of_every_type(c):
    values = ['"text"', "3.5", "-7", "true", "false", "null", "{}", "[]", '{"a": [1, {"b": null}]}']
    for value in values:
        hand_job(c, args=value, kwargs=value)
        hand_job(c, args=value, status="successful", keep_result=True, result=value)
        hand_dead_letter(c, args=value, kwargs=value)


def huge_numbers(c):
    big = f"[{HUGE_INT}, 1e400, -1e400, 1e-400, 123456789012345678901234567890]"
    hand_job(c, args=big, kwargs=f'{{"n": {HUGE_INT}}}', errors=f'[{{"attempt": {HUGE_INT}}}]')
    hand_job(c, status="successful", keep_result=True, result=big, timeout=float("inf"))
    hand_job(c, timeout=float("nan"), max_attempts=2**31 - 1, attempts=2**31 - 1)
    hand_job(c, timeout=1e308)
    hand_dead_letter(
        c,
        args=big,
        job_id=2**63 - 1,
        attempts=2**31 - 1,
        max_attempts=-(2**31),
        errors=f"[{HUGE_INT}]",
    )
    hand_worker(c, "big", f"[{HUGE_INT}]", pid=2**31 - 1, concurrency=-(2**31))


def deep_nesting(c):
    hand_job(c, args=DEEP, kwargs=f'{{"deep": {DEEP}}}', errors=f"[{DEEP}]")
    hand_job(c, status="successful", keep_result=True, result=DEEP)
    hand_dead_letter(c, args=DEEP, errors=DEEP)
    hand_worker(c, "deep", DEEP)


def empty_and_null(c):
    hand_job(c, name="", worker="", task_backend="")
    hand_job(c, status="running", attempts=1, started_at=None, lease_expires_at=None)
    hand_job(c, status="successful", finished_at=None, keep_result=True, result=None)
    hand_job(c, abort_requested_at=timezone.now(), abort_requested_by=None, status="running")
    hand_dead_letter(c, name="", error_type="", reason="", started_at=None, unique_key=None)
    hand_worker(c, "", "[]", hostname="")


def priority_extremes(c):
    hand_job(c, priority=-100)
    hand_job(c, priority=100)
    hand_dead_letter(c, priority=-32768)  # no range check on dead letters
    hand_dead_letter(c, priority=32767)


CASES = [
    slash_queue,
    awkward_queue_names,
    errors_of_every_shape,
    worker_queues_of_every_shape,
    json_of_every_type,
    huge_numbers,
    deep_nesting,
    empty_and_null,
    priority_extremes,
]


def every_page(connection) -> list[str]:
    """Every page of the admin that shows these rows, detail pages of every row included."""
    urls = [
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_pgjobs"]),
        reverse("admin:django_pgjobs_job_dashboard"),
        reverse("admin:django_pgjobs_deadletter_summary"),
    ]
    for model, table, key in (
        ("job", "pgjobs_job", "id"),
        ("deadletter", "pgjobs_deadletter", "id"),
        ("worker", "pgjobs_worker", "id"),
        ("queuestate", "pgjobs_queue", "name"),
    ):
        changelist = reverse(f"admin:django_pgjobs_{model}_changelist")
        urls.append(changelist)
        ids = [row[0] for row in connection.execute(f"SELECT {key} FROM {table}")]  # noqa: S608
        for pk in ids:
            if pk != "":  # no page of its own (an URL needs an id): listed without a link
                urls.append(reverse(f"admin:django_pgjobs_{model}_change", args=[quote(pk)]))
    jobs = reverse("admin:django_pgjobs_job_changelist")
    for view in ("due", "scheduled", "retrying", "running", "lease_expired", "successful"):
        urls.append(f"{jobs}?view={view}")
    queues = [row[0] for row in connection.execute("SELECT DISTINCT queue FROM pgjobs_job")]
    for queue in queues[:3]:
        urls.append(f"{jobs}?queue={quote_query(queue)}")
    return urls


def quote_query(text: str) -> str:
    from urllib.parse import quote as url_quote

    return url_quote(text, safe="")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_every_page_answers_with_hand_made_rows(admin_client, other_connection, case):
    case(other_connection)
    failures = []
    for url in every_page(other_connection):
        try:
            response = admin_client.get(url)
        except Exception as exc:  # noqa: BLE001 - the test client re-raises a view's error
            failures.append((url, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        if response.status_code != 200:
            failures.append((url, response.status_code))
    assert not failures, failures


def test_markup_in_every_text_column_is_shown_as_text(admin_client, other_connection):
    c = other_connection
    xss_json = json.dumps(XSS)
    entry = {key: XSS for key in ("at", "type", "message", "traceback", "worker")}
    hostile_errors = error_entries({**entry, "attempt": XSS}, XSS)
    for status in ("ready", "running", "successful"):
        hand_job(
            c,
            name=XSS,
            queue=XSS,
            status=status,
            attempts=1,
            args=f"[{xss_json}]",
            kwargs=json.dumps({XSS: XSS}),
            worker=XSS,
            abort_requested_by=XSS,
            abort_requested_at=timezone.now(),
            task_backend=XSS,
            errors=hostile_errors,
            keep_result=True,
            result=xss_json,
            started_at=timezone.now(),
            lease_expires_at=timezone.now(),
        )
    hand_job(c, name=XSS, queue=XSS + "2", unique_key=XSS)
    hand_dead_letter(
        c,
        name=XSS,
        queue=XSS,
        args=f"[{xss_json}]",
        kwargs=json.dumps({XSS: XSS}),
        reason=XSS,
        error_type=XSS,
        unique_key=XSS,
        task_backend=XSS,
        errors=hostile_errors,
    )
    hand_worker(c, XSS, f"[{xss_json}]", hostname=XSS)
    hand_worker(c, XSS + "2", xss_json, hostname=XSS)
    c.execute("INSERT INTO pgjobs_queue (name, paused, changed_at) VALUES (%s, true, now())", [XSS])
    c.execute(
        "INSERT INTO pgjobs_stat (queue, minute, succeeded, retried, dead_lettered, wait_buckets) "
        "VALUES (%s, date_trunc('minute', now()), 1, 1, 1, '{1}')",
        [XSS + "3"],
    )
    for url in every_page(c):
        page = admin_client.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert XSS not in body, url
        assert "<script>alert" not in body, url


def dashboard_form(client: Client, queue: str) -> tuple[str, dict]:
    """The action and the fields of the dashboard's pause/resume form of ``queue``."""
    page = client.get(reverse("admin:django_pgjobs_job_dashboard")).content.decode()
    forms = re.findall(r'<form method="post" action="([^"]*)">(.*?)</form>', page, re.S)
    for action, body in forms:
        fields = {
            name: html.unescape(value)
            for name, value in re.findall(r'name="([^"]+)" value="([^"]*)"', body)
        }
        if fields.get("queue") == queue:
            return action, fields
    raise AssertionError(f"no pause/resume form for {queue!r}")


def test_pause_and_resume_a_queue_named_with_a_slash(superuser, other_connection, start_worker):  # noqa: F811
    """The dashboard's buttons POST the queue's name, with the CSRF token, whatever it holds; a
    real worker then skips the paused queue and runs it once resumed."""
    queue = "reports/daily"
    job_id = hand_job(other_connection, queue=queue, args='["by hand"]')
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    action, fields = dashboard_form(client, queue)
    assert client.post(action, {"queue": queue}).status_code == 403  # no CSRF token
    response = client.post(action, fields)
    assert response.status_code == 302, response.status_code
    assert QueueState.objects.get(name=queue).paused
    worker = start_worker("--burst")
    assert worker.wait(timeout=60) == 0, worker.output()
    assert Job.objects.filter(pk=job_id).exists()  # skipped: its queue is paused
    action, fields = dashboard_form(client, queue)
    assert client.post(action, fields).status_code == 302
    assert not QueueState.objects.get(name=queue).paused
    worker = start_worker("--burst")
    assert worker.wait(timeout=60) == 0, worker.output()
    assert not Job.objects.filter(pk=job_id).exists()


@pytest.mark.parametrize("queue", ["..", "a\nb", "x?y#z", "%2F", XSS])
def test_pause_and_resume_any_queue_name_from_the_dashboard(admin_client, other_connection, queue):
    hand_job(other_connection, queue=queue)
    for paused in (True, False):
        action, fields = dashboard_form(admin_client, queue)
        assert admin_client.post(action, fields).status_code == 302
        assert QueueState.objects.get(name=queue).paused is paused


def test_pause_refuses_a_new_name_enqueue_would_refuse(admin_client):
    """Only queues some row already names may carry a name enqueue() refuses: a mistyped or
    forged name makes no new queue."""
    pause = reverse("admin:django_pgjobs_queuestate_pause")
    assert admin_client.post(pause, {"queue": "no/such"}).status_code == 404
    assert admin_client.post(pause, {"queue": "bad\x00"}).status_code == 404
    assert admin_client.post(pause, {}).status_code == 404
    assert not QueueState.objects.exists()
    assert admin_client.post(pause, {"queue": "fresh"}).status_code == 302
    assert QueueState.objects.get(name="fresh").paused


@pytest.mark.parametrize("sizes", ["[null]", '"abc"', '{"a": 1}', "[true, 2]"])
def test_a_workflow_row_whose_sizes_are_not_numbers_leaves_its_pages_up(
    admin_client, other_connection, sizes
):
    workflow = other_connection.execute(
        "INSERT INTO pgjobs_workflow (name, state, step, remaining, sizes, reason, created_at) "
        "VALUES ('hand made', 'running', 0, 1, %s::jsonb, '', now()) RETURNING id",
        [sizes],
    ).fetchone()[0]
    assert admin_client.get("/admin/django_pgjobs/workflow/").status_code == 200
    page = admin_client.get(f"/admin/django_pgjobs/workflow/{workflow}/change/")
    assert page.status_code == 200


def test_a_workflow_page_asked_for_with_no_number_is_not_found(admin_client):
    assert admin_client.get("/admin/django_pgjobs/workflow/abc/change/").status_code == 404


def test_edit_and_requeue_refuses_json_nested_too_deep(admin_client, other_connection):
    letter = hand_dead_letter(other_connection, args='["x"]')
    page = admin_client.post(
        f"/admin/django_pgjobs/deadletter/{letter}/edit/", {"args": DEEP, "kwargs": "{}"}
    )
    # refused, the form shown again (Python 3.11 cannot parse it: "not valid JSON"; 3.13 can,
    # and the payload's own check refuses it), nothing requeued
    assert page.status_code == 200 and 'id="pgjobs-refused"' in page.content.decode()
    assert not Job.objects.exists()


@pytest.mark.parametrize("args", ['["\\u0000", 2]', "[1e400, 1]"])
def test_a_schedule_whose_arguments_postgresql_cannot_store_is_refused_by_its_form(
    admin_client, args
):
    from django_pgjobs.models import Schedule

    form = {"name": "hand made", "job_name": "testproject.demo.jobs.record", "cron": "* * * * *"}
    form |= {"args": args, "kwargs": "{}", "catch_up": "0", "time_zone": "UTC"}
    page = admin_client.post("/admin/django_pgjobs/schedule/add/", form)
    assert page.status_code == 200, page.content[:300]
    assert "errornote" in page.content.decode() and not Schedule.objects.exists()


def test_the_links_to_a_flow_keys_jobs_carry_the_key_url_encoded(admin_client, other_connection):
    from django_pgjobs.models import FlowKey

    FlowKey.objects.create(key="fair:a&b+1#2", ready_at=timezone.now())
    hand_job(other_connection, flow_key="fair:a&b+1#2")
    page = html.unescape(admin_client.get("/admin/django_pgjobs/flowkey/").content.decode())
    assert "?q=fair%3Aa%26b%2B1%232" in page
