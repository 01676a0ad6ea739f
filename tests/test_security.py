"""Security: SQL injection attempts change nothing, only registered jobs run, secrets stay hidden.

The admin's own checks (permission matrix, CSRF, markup escaped in seeded rows) live in the
test_admin_*.py files; here the hostile input comes through the public API, the worker and the
admin's search box and filters, end to end.
"""

from __future__ import annotations

import logging

import pytest
from admin_data import make_user, seed, viewer_perms
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse
from helpers import drain, run_worker, wait_until

from django_pgjobs import job, operations
from django_pgjobs.models import DeadLetter, Job, QueueState
from django_pgjobs.models import Worker as WorkerRow
from django_pgjobs.worker import Worker
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

INJECTIONS = [
    "x'; DROP TABLE pgjobs_job; --",
    'x"; DELETE FROM pgjobs_deadletter; --',
    "' OR '1'='1",
    "1 OR 1=1",
    "%' OR name LIKE '%",
    "emails) OR (1=1",
    "$1",
    "%(queue)s",
    "{queue}",
    "\\",
]


def snapshot():
    """Everything an injection could change: rows of every pgjobs table and the table list."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY table_name"
        )
        tables = [row[0] for row in cursor.fetchall()]
    return (
        tables,
        sorted(Job.objects.values_list("id", "status", "queue", "run_after", "attempts")),
        sorted(DeadLetter.objects.values_list("id", "job_id")),
        sorted(QueueState.objects.values_list("name", "paused")),
        sorted(WorkerRow.objects.values_list("id", flat=True)),
    )


# -- queue names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", INJECTIONS)
def test_sql_in_queue_names_is_refused_everywhere_and_changes_nothing(name):
    demo.record.enqueue("bystander")
    before = snapshot()
    with pytest.raises(ValueError, match="queue must be"):
        demo.record.using(queue=name).enqueue("x")
    with pytest.raises(CommandError, match="queue must be"):
        call_command("runjobs", "--queue", name, "--burst")
    with pytest.raises(ValueError, match="queue must be"):
        Worker(queues=["default", name])
    with pytest.raises(ValueError, match="queue must be"):
        operations.set_queue_paused(connection, name, True)
    assert snapshot() == before


def test_sql_in_stored_values_is_data_never_statements():
    """Rows written around the API (or by another service) carry SQL in every text column: the
    claim, the notifications, the dead-letter move and the worker treat it as plain data."""
    hostile = "x'); DROP TABLE pgjobs_job; --"
    runs = Job.objects.create(
        name=demo.record.name, queue=hostile, args=[hostile], unique_key=hostile
    )
    unknown = Job.objects.create(name=hostile, queue="default", args=[hostile])
    run_worker(queues=None)
    assert Execution.objects.get(job_id=runs.pk).label == hostile
    dead = DeadLetter.objects.get(job_id=unknown.pk)
    assert dead.name == hostile and dead.args == [hostile] and dead.error_type == "UnknownJob"
    assert not Job.objects.exists()
    demo.record.using(queue="after").enqueue("tables still there")
    run_worker(queues=["after"])
    assert Execution.objects.filter(label="tables still there").exists()


# -- only registered jobs run, JSON only ------------------------------------------------------------


def test_a_row_can_never_import_or_call_anything_unregistered(tmp_path):
    marker = tmp_path / "pwned"
    for name in (
        "os.system",
        "subprocess.check_call",
        "builtins.exec",
        "django.core.management.call_command",
        "testproject.demo.jobs._record",  # a real function of a jobs module, but not a job
        "testproject.demo.jobs.os._exit",
    ):
        Job.objects.create(name=name, args=[f"touch {marker}"])
    run_worker()
    assert not marker.exists()
    assert DeadLetter.objects.filter(error_type="UnknownJob").count() == 6
    assert not Execution.objects.exists()


def test_forged_names_cannot_inject_log_lines(caplog):
    caplog.set_level(logging.INFO, logger="django_pgjobs")
    Job.objects.create(name="evil\n2026-01-01 00:00:00 ERROR django_pgjobs.worker: forged", args=[])
    run_worker()
    assert DeadLetter.objects.get().error_type == "UnknownJob"
    assert not any(line.startswith("2026-01-01") for line in caplog.text.splitlines())
    assert all("\n" not in record.getMessage() for record in caplog.records)


def test_arguments_are_json_never_pickle():
    row = demo.record.enqueue("plain text", sleep=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jsonb_typeof(args), args::text FROM pgjobs_job WHERE id = %s", [row.pk]
        )
        assert cursor.fetchone() == ("array", '["plain text"]')
    with pytest.raises(TypeError):
        demo.record.enqueue(b"\x80\x04\x95")  # pickle's magic bytes are not an argument either


# -- secrets (PGJOBS["REDACT_KEYS"], the test project sets password and token) ----------------------

SECRETS = ("hunter2-password", "tok-3f9a7c1d")


@job(max_attempts=2)
def log_in(user: str, password: str, options: dict | None = None) -> None:
    token = (options or {}).get("token", "")
    raise PermissionError(f"login refused for {user} with password {password!r} and token {token}")


def test_secret_arguments_never_reach_worker_logs_or_stored_errors(caplog):
    caplog.set_level(logging.DEBUG, logger="django_pgjobs")
    # positional password, nested token: found through the function's signature and any depth
    log_in.enqueue("ann", SECRETS[0], options={"token": SECRETS[1]})
    demo.record.enqueue("fine", sleep=0)
    drain()
    dead = DeadLetter.objects.get()
    assert dead.error_type == "PermissionError"
    stored = [dead.reason] + [e["message"] + e["traceback"] for e in dead.errors]
    for secret in SECRETS:
        assert secret not in caplog.text
        assert all(secret not in text for text in stored), stored
    assert "login refused for ann with password '********' and token ********" in dead.reason
    assert "********" in caplog.text
    assert dead.args == ["ann", SECRETS[0]]  # the row keeps the real arguments for a requeue


def test_secret_arguments_are_hidden_in_the_admin_after_a_real_failure(client, superuser):
    client.force_login(superuser)
    log_in.enqueue("ann", password=SECRETS[0], options={"token": SECRETS[1]})
    drain()
    dead = DeadLetter.objects.get()
    page = client.get(reverse("admin:django_pgjobs_deadletter_change", args=[dead.pk]))
    listing = client.get(reverse("admin:django_pgjobs_deadletter_changelist"))
    for response in (page, listing):
        assert response.status_code == 200
        content = response.content.decode()
        assert SECRETS[0] not in content and SECRETS[1] not in content


@pytest.mark.parametrize("model", ["job", "deadletter"])
def test_no_filter_from_the_url_reads_inside_hidden_arguments(client, model):
    """A user who may only view sees the REDACT_KEYS values masked; a filter on them in the
    query string would tell them a character at a time (by the rows it counts): refused."""
    client.force_login(make_user("viewer", perms=viewer_perms()))
    log_in.enqueue("ann", password=SECRETS[0], options={"token": SECRETS[1]})
    if model == "deadletter":
        drain()
    url = reverse(f"admin:django_pgjobs_{model}_changelist")
    assert client.get(url).context["cl"].result_count == 1
    for lookup in [
        {"kwargs__password__startswith": SECRETS[0][:3]},
        {"kwargs__options__token": SECRETS[1]},
        {"args__1__contains": "x"},
        {"kwargs__has_key": "password"},
        {"errors__0__message__contains": "x"},
    ]:
        assert client.get(url, lookup).status_code == 400, lookup
    assert client.get(url, {"queue": "default"}).status_code == 200  # the filters offered work


def test_a_hand_written_sort_is_not_obeyed(client, superuser):
    """``sortable_by = ()``: no column links, and ``?o=`` does not sort the table either."""
    client.force_login(superuser)
    for queue in ["qb", "qa", "qc"]:
        demo.always_fails.using(queue=queue, max_attempts=1).enqueue(queue)
        drain()
    url = reverse("admin:django_pgjobs_deadletter_changelist")
    plain = [row.pk for row in client.get(url).context["cl"].result_list]
    assert [d.queue for d in DeadLetter.objects.filter(pk__in=plain)] != sorted(["qb", "qa", "qc"])
    for order in ["7", "-7", "7.1"]:  # the queue column (0: the checkbox)
        sorted_by_hand = client.get(url, {"o": order}).context["cl"].result_list
        assert [row.pk for row in sorted_by_hand] == plain, order


XSS = "<img src=x onerror=alert(1)>"


@job(max_attempts=2)
def raises_markup(payload: str) -> None:
    raise ValueError(f"bad input: {payload}")


def test_markup_from_a_real_handler_error_renders_as_text(client, superuser):
    client.force_login(superuser)
    raises_markup.using(max_attempts=3).enqueue(XSS)
    run_worker()  # attempt 1 fails: the job is retrying, with the error shown in the job pages
    retrying = Job.objects.get()
    pages = [
        client.get(reverse("admin:django_pgjobs_job_changelist")),
        client.get(reverse("admin:django_pgjobs_job_changelist") + "?view=retrying"),
        client.get(reverse("admin:django_pgjobs_job_change", args=[retrying.pk])),
    ]
    drain()
    dead = DeadLetter.objects.get()
    pages += [
        client.get(reverse("admin:django_pgjobs_deadletter_changelist")),
        client.get(reverse("admin:django_pgjobs_deadletter_change", args=[dead.pk])),
        client.get(reverse("admin:django_pgjobs_deadletter_summary")),
    ]
    for response in pages:
        assert response.status_code == 200
        content = response.content.decode()
        assert XSS not in content
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[2].content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[4].content.decode()


# -- admin search box and filters ---------------------------------------------------------------------

ADMIN_INPUTS = [
    *INJECTIONS,
    "\x00",
    "name\x00",
    "²",  # a digit to str.isdigit(), not to int()
    "9" * 30,  # past bigint
    "#" + "9" * 30,
    "-1",
    "",
]
JOB_PARAMETERS = ["q", "queue", "name", "view", "o", "p", "e"]
DEAD_PARAMETERS = ["q", "queue", "name", "error_type", "within", "o", "p"]


@pytest.mark.parametrize("value", ADMIN_INPUTS)
def test_hostile_admin_search_and_filters_change_nothing(client, superuser, value):
    client.force_login(superuser)
    seed()
    before = snapshot()
    pages = [(reverse("admin:django_pgjobs_job_changelist"), JOB_PARAMETERS)]
    pages.append((reverse("admin:django_pgjobs_deadletter_changelist"), DEAD_PARAMETERS))
    for url, parameters in pages:
        for parameter in parameters:
            response = client.get(url, {parameter: value})
            # 200, or Django's redirect to ?e=1 for a filter value it cannot use: never a 500
            assert response.status_code in (200, 302), (url, parameter, response.status_code)
            # (Django's search form refuses a term with NUL characters and shows every row)
            if (
                parameter == "q"
                and response.status_code == 200
                and value.strip()
                and "\x00" not in value
            ):
                assert response.context["cl"].result_count == 0, (url, value)
    for view in ("admin:django_pgjobs_job_dashboard", "admin:django_pgjobs_deadletter_summary"):
        assert client.get(reverse(view), {"queue": value, "q": value}).status_code == 200
    if value.strip("\x00 "):
        # the buttons of a job or dead letter page, given an id that is not one
        for name, action in (("job", "cancel"), ("job", "run_now"), ("deadletter", "requeue")):
            url = reverse(f"admin:django_pgjobs_{name}_act", args=[value, action])
            assert client.post(url).status_code in (302, 404), (name, action, value)
    assert snapshot() == before


def pgjobs_changelists():
    from django.contrib import admin

    # the Dashboard entry (a proxy model) has no list: its "changelist" leads to the dashboard
    return [
        model
        for model in admin.site._registry
        if model._meta.app_label == "django_pgjobs" and not model._meta.proxy
    ]


def test_nul_in_any_generic_lookup_lists_nothing_with_an_error_on_every_changelist(
    client,
    superuser,
    start_worker,
):
    """A running runjobs process registers its Worker row (hostname, pid...) and its queue."""
    client.force_login(superuser)
    seed()
    demo.record.enqueue("keeps the worker busy", sleep=60)
    worker = start_worker()
    try:
        wait_until_worker_registered()
        models = pgjobs_changelists()
        assert {m._meta.model_name for m in models} >= {"job", "deadletter", "worker", "queuestate"}
        for model in models:
            url = reverse(f"admin:django_pgjobs_{model._meta.model_name}_changelist")
            assert client.get(url).context["cl"].result_count > 0, url
            lookups = ["pk", "id__gt", "pk__in"]
            for field in model._meta.concrete_fields:
                lookups += [field.name, f"{field.name}__exact", f"{field.name}__startswith"]
            for lookup in lookups:
                response = client.get(url, {lookup: "\x00"})
                assert response.status_code == 200, (url, lookup, response.status_code)
                assert response.context["cl"].result_count == 0, (url, lookup)
                shown = [str(m) for m in response.context["messages"]]
                assert any("NUL character" in m and lookup in m for m in shown), (url, shown)
            # a NUL in the name of the lookup, and next to a lookup that works
            response = client.get(url, {"queue\x00": "x", "pk__gt": "0"})
            assert response.status_code == 200 and response.context["cl"].result_count == 0
    finally:
        worker.kill()


def wait_until_worker_registered():
    wait_until(lambda: Job.objects.filter(status="running").exists(), timeout=30)
    wait_until(lambda: WorkerRow.objects.exists(), timeout=30)
