"""Long arguments and results: a detail page shows a bounded prefix and says how much more
there is; the whole value is one click away, behind the same permissions as the page.

``admin_client`` is pytest-django's: a client logged in as a superuser."""

from __future__ import annotations

import json
import time

import pytest
from admin_data import dead_letter, job, make_user
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_pgjobs import job as django_pgjobs_job
from django_pgjobs.redaction import REDACTED, may_redact, redact_value

pytestmark = pytest.mark.django_db(transaction=True)

#: About 1 MB of JSON in 14,000 small objects (what pretty-printing and escaping found slow).
MEGABYTE_LIST = [
    {"row": i, "sku": f"sku-{i:06d}", "qty": i % 7, "tags": ["red", "large"]} for i in range(14000)
]
MEGABYTE_DICT = {"rows": MEGABYTE_LIST, "note": "end"}
#: A detail page without long values weighs about 15 KB; the prefixes add a few KB each.
PAGE_BYTES_MAX = 64 * 1024
PAGE_SECONDS_MAX = 0.5  # loose (a shared machine): in full, the job's page took 1.2 s


@django_pgjobs_job(name="tests.admin.long_sign_in")
def long_sign_in(password: str, payload: list) -> None:
    """A job whose first positional argument is a secret by its parameter's name."""


@pytest.fixture
def long_rows():
    return {
        "job": job(
            args=MEGABYTE_LIST,
            kwargs=MEGABYTE_DICT,
            status="successful",
            keep_result=True,
            result=MEGABYTE_DICT,
        ),
        "dead": dead_letter(args=MEGABYTE_LIST, kwargs=MEGABYTE_DICT),
    }


def detail(row) -> str:
    model = "job" if row.__class__.__name__ == "Job" else "deadletter"
    return reverse(f"admin:django_pgjobs_{model}_change", args=[row.pk])


def value_url(row, field: str) -> str:
    model = "job" if row.__class__.__name__ == "Job" else "deadletter"
    return reverse(f"admin:django_pgjobs_{model}_value", args=[row.pk, field])


def stored_bytes(table: str, pk: int, field: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT octet_length({field}::text) FROM {table} WHERE id = %s", [pk])  # noqa: S608
        return cursor.fetchone()[0]


@pytest.mark.parametrize("kind", ["job", "dead"])
def test_a_detail_page_with_megabyte_values_stays_small_and_fast(admin_client, long_rows, kind):
    row = long_rows[kind]
    admin_client.get(detail(row))  # warm: templates compiled, connection open
    started = time.perf_counter()
    response = admin_client.get(detail(row))
    seconds = time.perf_counter() - started
    assert response.status_code == 200
    page = response.content.decode()
    assert len(response.content) < PAGE_BYTES_MAX, len(response.content)
    assert seconds < PAGE_SECONDS_MAX, seconds
    assert "sku-000000" in page and "sku-013999" not in page  # the head, not the tail
    fields = ["args", "kwargs"] + (["result"] if kind == "job" else [])
    table = "pgjobs_job" if kind == "job" else "pgjobs_deadletter"
    for field in fields:
        total = stored_bytes(table, row.pk, field)
        assert f"of {total:,} bytes" in page, field
        assert f'href="{value_url(row, field)}"' in page, field
    assert page.count(" more bytes") == len(fields)


@pytest.mark.parametrize("kind", ["job", "dead"])
def test_the_whole_value_is_one_click_away(admin_client, long_rows, kind):
    row = long_rows[kind]
    for field, stored in (("args", MEGABYTE_LIST), ("kwargs", MEGABYTE_DICT)):
        response = admin_client.get(value_url(row, field))
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json; charset=utf-8"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert json.loads(response.content) == stored
    if kind == "job":
        assert json.loads(admin_client.get(value_url(row, "result")).content) == MEGABYTE_DICT
    else:
        assert admin_client.get(value_url(row, "result")).status_code == 404  # no such column
    assert admin_client.get(value_url(row, "errors")).status_code == 404
    assert admin_client.get(value_url(row, "name")).status_code == 404


def test_the_whole_value_needs_the_permission_of_the_page(client, long_rows):
    job_args = value_url(long_rows["job"], "args")
    dead_args = value_url(long_rows["dead"], "args")
    response = client.get(job_args)  # anonymous: the admin's login page
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    staff = Client()
    staff.force_login(make_user("staff"))
    assert staff.get(job_args).status_code == 403
    assert staff.get(dead_args).status_code == 403
    jobs_only = Client()
    jobs_only.force_login(make_user("jobs-viewer", perms=("view_job",)))
    assert jobs_only.get(job_args).status_code == 200
    assert jobs_only.get(dead_args).status_code == 403
    outsider = Client()
    outsider.force_login(make_user("outsider", staff=False, perms=("view_job",)))
    assert outsider.get(job_args).status_code == 302  # not staff: the login page again
    jobs_only_again = jobs_only.get(
        value_url(long_rows["job"], "args").replace(f"/{long_rows['job'].pk}/", "/999999999/")
    )
    assert jobs_only_again.status_code == 404


def test_a_long_value_keeps_its_secrets_in_the_prefix_and_in_the_whole(admin_client):
    # PostgreSQL orders an object's keys shortest first: the secrets come before the rows
    keyed = job(kwargs={"password": "hunter2-secret", "the_rows": MEGABYTE_LIST})
    positional = job(name="tests.admin.long_sign_in", args=["s3cr3t-pw", MEGABYTE_LIST])
    done = job(
        status="successful",
        keep_result=True,
        result={"Token": "tok-123", "the_rows": MEGABYTE_LIST},
    )
    for row, secret in ((keyed, "hunter2-secret"), (positional, "s3cr3t-pw"), (done, "tok-123")):
        page = admin_client.get(detail(row)).content.decode()
        assert secret not in page and REDACTED in page
        assert " more bytes" in page and len(page) < PAGE_BYTES_MAX
    assert "hunter2-secret" not in admin_client.get(value_url(keyed, "kwargs")).content.decode()
    whole = json.loads(admin_client.get(value_url(positional, "args")).content)
    assert whole[0] == REDACTED and whole[1] == MEGABYTE_LIST
    assert json.loads(admin_client.get(value_url(done, "result")).content)["Token"] == REDACTED


def pg_text(value) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb::text", [json.dumps(value)])
        return cursor.fetchone()[0]


@pytest.mark.parametrize(
    "value",
    [
        {"password": "p4ss"},
        {"PASSWORD": "p4ss"},
        {"nested": [{"Token": {"deep": "t0k3n"}}]},
        {"to\u212aen": "kelvin sign, lower() gives token"},
        {"passwords": "not a redacted key", "x": "password"},
        ["password", "token"],
        {"a": 1},
        "password",
    ],
)
def test_redaction_is_needed_only_where_the_stored_text_says_so(value):
    """The prefix shortcut: a stored text in which no redacted key appears as a key is shown
    as it is; whenever redaction would change the value, the text says so."""
    text = pg_text(value)
    if redact_value(value) != value:
        assert may_redact(text)
        for cut in range(1, len(text)):  # any prefix showing part of a secret value
            head = text[:cut]
            secret_shown = any(s in head for s in ("p4ss", "t0k3n", "kelvin"))
            assert may_redact(head) or not secret_shown, head
