"""A job's error history can weigh tens of megabytes (hundreds of attempts, long tracebacks): the
admin's pages and actions read it in PostgreSQL and fetch only what they show. A detail page
shows the newest ``ERRORS_SHOWN`` errors, each traceback cut to its head and tail, and says how
many older errors it leaves out and how to read them all; a list shows the last error's type and
the start of its message; no action loads the history. (Nor does a job page load its metadata
whole to tell whether there is any.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from admin_data import dead_letter, job
from django.db import connection, connections
from django.urls import reverse

from django_pgjobs import get_result
from django_pgjobs.admin import values
from django_pgjobs.models import DeadLetter, Job

pytestmark = pytest.mark.django_db(transaction=True)

ERRORS = 120
TRACEBACK_CHARS = 40_000  # 120 of them: 5 MB of errors
#: A page of the newest 20 errors, tracebacks cut to 8,000 characters: about 200 KB, where the
#: whole history made a page of 2.5 MB (and 40 MB in the review that found it).
PAGE_BYTES_MAX = 300_000
#: What one statement of these pages may fetch: the rows they show, never the history.
FETCHED_BYTES_MAX = 250_000

ERRORS_SQL = """
UPDATE {table} SET errors = (
    SELECT jsonb_agg(jsonb_build_object(
        'at', to_char((now() - make_interval(mins => %(errors)s - i)) AT TIME ZONE 'UTC',
                      'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
        'attempt', i,
        'type', 'ValueError',
        'message', 'boom ' || lpad(i::text, 4, '0'),
        'traceback', 'head-of-' || lpad(i::text, 4, '0') || repeat('x', %(chars)s)
                     || 'tail-of-' || lpad(i::text, 4, '0'),
        'worker', 'web-1:4242:a1b2c3d4') ORDER BY i)
    FROM generate_series(1, %(errors)s) AS i)
WHERE id = %(id)s
"""


def give_errors(row, errors: int = ERRORS, *, using: str = "default") -> None:
    """``errors`` failed attempts for ``row``, written in SQL: each traceback is
    ``TRACEBACK_CHARS`` long, its first and last characters naming its attempt."""
    table = "pgjobs_job" if isinstance(row, Job) else "pgjobs_deadletter"
    with connections[using].cursor() as cursor:
        cursor.execute(
            ERRORS_SQL.format(table=table),
            {"errors": errors, "chars": TRACEBACK_CHARS, "id": row.pk},
        )


def detail(row) -> str:
    model = "job" if isinstance(row, Job) else "deadletter"
    return reverse(f"admin:django_pgjobs_{model}_change", args=[row.pk])


class FetchedBytes:
    """An ``execute_wrapper`` recording the bytes each statement's result brings from the
    database (psycopg holds a result whole once ``execute`` returns)."""

    def __init__(self) -> None:
        self.statements: list[tuple[int, str]] = []

    def __call__(self, execute, sql, params, many, context):
        outcome = execute(sql, params, many, context)
        result = context["cursor"].cursor.pgresult
        if result is not None:
            cells = (
                result.get_value(row, column)
                for row in range(result.ntuples)
                for column in range(result.nfields)
            )
            self.statements.append((sum(len(cell or b"") for cell in cells), sql[:300]))
        return outcome

    def assert_nothing_big(self) -> None:
        assert self.statements
        big = [(size, sql) for size, sql in self.statements if size > FETCHED_BYTES_MAX]
        assert not big, big


@contextmanager
def fetched() -> Iterator[FetchedBytes]:
    recorder = FetchedBytes()
    with connection.execute_wrapper(recorder):
        yield recorder


@pytest.mark.parametrize("kind", ["job", "dead"])
def test_a_page_shows_the_newest_errors_of_a_history_of_megabytes(admin_client, kind):
    row = job(attempts=ERRORS, max_attempts=ERRORS + 5) if kind == "job" else dead_letter()
    give_errors(row)
    with fetched() as statements:
        response = admin_client.get(detail(row))
    assert response.status_code == 200
    assert len(response.content) < PAGE_BYTES_MAX, len(response.content)
    statements.assert_nothing_big()
    page = response.content.decode()
    shown = values.ERRORS_SHOWN
    newest, oldest_shown = ERRORS, ERRORS - shown + 1
    assert f"Errors (the newest {shown} of {ERRORS}, newest first)" in page
    for attempt in (newest, oldest_shown):
        assert f"boom {attempt:04d}" in page
        assert f"head-of-{attempt:04d}" in page and f"tail-of-{attempt:04d}" in page
    assert f"boom {oldest_shown - 1:04d}" not in page
    errors = page[page.index('id="pgjobs-errors"') :]
    assert errors.index(f"boom {newest:04d}") < errors.index(f"boom {oldest_shown:04d}")
    cut = len(f"head-of-{newest:04d}") * 2 + TRACEBACK_CHARS - 8_000
    assert page.count(f"[... {cut:,} characters not shown here ...]") == shown
    left_out = ERRORS - shown
    job_id = row.pk if kind == "job" else row.job_id
    assert f"The {left_out} older errors are not shown here." in page
    assert f"<code>get_result({job_id}).errors</code>" in page
    assert f"{left_out} earlier failed attempts are left out here" in page  # the timeline


def test_what_the_page_leaves_out_is_what_get_result_returns(admin_client):
    row = dead_letter(job_id=424242)
    give_errors(row, values.ERRORS_SHOWN + 1)
    page = admin_client.get(detail(row)).content.decode()
    assert "The 1 older error is not shown here." in page
    assert "<code>get_result(424242).errors</code>" in page
    assert "1 earlier failed attempt is left out here" in page
    errors = get_result(424242).errors
    assert len(errors) == values.ERRORS_SHOWN + 1 and errors[0]["message"] == "boom 0001"
    assert "boom 0001" not in page and "boom 0002" in page


def test_a_short_history_is_shown_whole_as_before(admin_client):
    row = job(attempts=3)
    give_errors(row, 3)
    page = admin_client.get(detail(row)).content.decode()
    assert "Errors (3, newest first)" in page
    assert "older error" not in page and "left out here" not in page
    assert all(f"boom {attempt:04d}" in page for attempt in (1, 2, 3))


@pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)
def test_the_page_of_another_database_names_it_in_the_call(admin_client, settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2"}}
    row = Job.objects.using("jobs2").create(name="testproject.demo.jobs.record", queue="heavy")
    give_errors(row, values.ERRORS_SHOWN + 5, using="jobs2")
    page = admin_client.get(detail(row) + "?_database=jobs2", follow=True).content.decode()
    assert f"<code>get_result({row.pk}, using=&#x27;jobs2&#x27;).errors</code>" in page
    assert len(get_result(row.pk, using="jobs2").errors) == values.ERRORS_SHOWN + 5


@pytest.mark.parametrize("kind", ["job", "dead"])
def test_a_list_shows_the_last_error_without_fetching_the_history(admin_client, kind):
    row = job(attempts=ERRORS, max_attempts=ERRORS + 5) if kind == "job" else dead_letter()
    give_errors(row)
    model = "job" if kind == "job" else "deadletter"
    url = reverse(f"admin:django_pgjobs_{model}_changelist")
    with fetched() as statements:
        response = admin_client.get(url + ("?view=retrying" if kind == "job" else ""))
    assert response.status_code == 200
    assert len(response.content) < 100_000, len(response.content)
    statements.assert_nothing_big()
    if kind == "job":
        assert f"ValueError: boom {ERRORS:04d}" in response.content.decode()


def test_actions_on_rows_with_megabytes_of_errors_never_fetch_them(admin_client):
    retrying = job(attempts=ERRORS, max_attempts=ERRORS + 5)
    letter = dead_letter()
    for row in (retrying, letter):
        give_errors(row)
    jobs = reverse("admin:django_pgjobs_job_changelist")
    letters = reverse("admin:django_pgjobs_deadletter_changelist")
    edit = reverse("admin:django_pgjobs_deadletter_edit", args=[letter.pk])
    with fetched() as statements:
        edit_page = admin_client.get(edit)
        retried = admin_client.post(
            jobs + "?view=retrying",
            {"action": "retry_now", "_selected_action": [retrying.pk]},
        )
        requeued = admin_client.post(
            letters, {"action": "requeue", "_selected_action": [letter.pk]}
        )
    assert edit_page.status_code == 200 and len(edit_page.content) < 100_000
    assert retried.status_code == 302 and requeued.status_code == 302
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()  # requeued: the actions ran
    statements.assert_nothing_big()


def test_a_job_page_tells_whether_it_has_metadata_without_loading_it(admin_client):
    without = job()
    with_metadata = job()
    with connection.cursor() as cursor:  # past what set_metadata accepts: a row written by hand
        cursor.execute(
            "UPDATE pgjobs_job SET metadata = jsonb_build_object('rows', repeat('m', 1000000)) "
            "WHERE id = %s",
            [with_metadata.pk],
        )
    with fetched() as statements:
        shown = admin_client.get(detail(with_metadata)).content.decode()
        empty = admin_client.get(detail(without)).content.decode()
    statements.assert_nothing_big()
    assert "more bytes not shown" in shown
    metadata = re.search(r'field-job_metadata.*?<div class="readonly">(.*?)</div>', empty, re.S)
    assert metadata and metadata.group(1) == "–", metadata
