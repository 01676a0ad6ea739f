"""``pgjobs/metrics``: the Prometheus text format, parsed back by prometheus_client's own parser,
says what the rows say; nobody reads it without staff permission or the token."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from admin_data import dead_letter, job, make_user
from django.conf import settings
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_pgjobs.conf import ConfigError, get_config
from django_pgjobs.metrics import WAIT_BUCKET_BOUNDS
from django_pgjobs.models import QueueStat, QueueState, Worker

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/pgjobs/metrics"
TOKEN = "k3rPj9-metrics-token-for-the-tests-0123"


def with_token(token: str = TOKEN):
    return override_settings(PGJOBS={**settings.PGJOBS, "METRICS_TOKEN": token})


def samples(response) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape as ``{(name, sorted labels): value}``."""
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def q(name: str, **labels) -> tuple[str, tuple]:
    return name, tuple(sorted(labels.items()))


def seed_rows() -> None:
    """Two queues in every state, dead letters, statistics and workers, with known numbers."""
    now = timezone.now()
    job(queue="mail", run_after=now - timedelta(seconds=120))
    job(queue="mail", run_after=now - timedelta(seconds=10))
    job(queue="mail", run_after=now - timedelta(seconds=10))
    job(queue="mail", run_after=now + timedelta(hours=1))
    job(queue="mail", run_after=now + timedelta(hours=2))
    job(queue="mail", attempts=1, run_after=now + timedelta(seconds=30))
    lease = {"status": "running", "attempts": 1, "run_after": now - timedelta(minutes=5)}
    job(queue="mail", lease_expires_at=now - timedelta(seconds=10), **lease)
    job(queue="mail", lease_expires_at=now + timedelta(seconds=50), **lease)
    job(queue="reports", run_after=now - timedelta(seconds=5))
    QueueState.objects.create(name="reports", paused=True)
    dead_letter(queue="mail", failed_at=now - timedelta(minutes=5))
    dead_letter(queue="mail", failed_at=now - timedelta(minutes=50))
    dead_letter(queue="mail", failed_at=now - timedelta(hours=2))
    minute = now.replace(second=0, microsecond=0)
    waits = [0] * (len(WAIT_BUCKET_BOUNDS) + 1)
    waits[3] = 10  # ten claims that waited between 0.1 s and 0.25 s
    QueueStat.objects.create(
        queue="mail",
        minute=minute - timedelta(minutes=1),
        succeeded=12,
        retried=2,
        dead_lettered=1,
        wait_buckets=waits,
    )
    QueueStat.objects.create(
        queue="mail", minute=minute - timedelta(minutes=30), succeeded=6, wait_buckets=[0]
    )
    for id, queues, seen in (("a", ["mail"], 0), ("b", [], 5), ("gone", [], 600)):
        Worker.objects.create(
            id=id, hostname="h", pid=1, queues=queues, concurrency=1,
            last_seen_at=now - timedelta(seconds=seen),
        )  # fmt: skip


def test_the_scrape_says_what_the_rows_say(admin_client):
    seed_rows()
    before = timezone.now()
    found = samples(admin_client.get(URL))
    after = timezone.now()
    jobs = {"due": 3, "scheduled": 2, "retrying": 1, "running": 2}
    assert {state: found.get(q("pgjobs_jobs", queue="mail", state=state)) for state in jobs} == jobs
    per_queue = {  # series: (mail, reports)
        "pgjobs_jobs": (8, 1),  # every state
        "pgjobs_leases_expired": (1, 0),
        "pgjobs_queue_paused": (0, 1),
        "pgjobs_dead_letters": (3, 0),
        "pgjobs_dead_letters_last_hour": (2, 0),
        "pgjobs_succeeded_last_hour": (18, 0),
        "pgjobs_failed_last_hour": (3, 0),
        "pgjobs_queue_workers_alive": (2, 1),
    }
    assert {
        name: tuple(
            sum(
                value
                for (n, labels), value in found.items()
                if n == name and ("queue", queue) in labels
            )
            for queue in ("mail", "reports")
        )
        for name in per_queue
    } == per_queue
    assert (found[q("pgjobs_workers_alive")], found[q("pgjobs_counts_estimated")]) == (2, 0)
    # the oldest due job became due 120 s before the rows were written
    age = found[q("pgjobs_oldest_due_job_age_seconds", queue="mail")]
    assert 120 <= age <= 120 + (after - before).total_seconds() + 5
    assert 5 <= found[q("pgjobs_oldest_due_job_age_seconds", queue="reports")] <= 15
    # 12 successes in the last five minutes, over the 4 to 5 minutes they span so far
    assert 12 / 300 <= found[q("pgjobs_throughput_jobs_per_second", queue="mail")] <= 12 / 240
    # ten waits in (0.1, 0.25]: the 95th is 9.5 of them in, the 99th 9.9, linearly
    assert found[q("pgjobs_wait_seconds", queue="mail", quantile="0.95")] == pytest.approx(
        0.1 + 0.15 * 0.95
    )
    assert found[q("pgjobs_wait_seconds", queue="mail", quantile="0.99")] == pytest.approx(
        0.1 + 0.15 * 0.99
    )
    assert q("pgjobs_wait_seconds", queue="reports", quantile="0.95") not in found
    assert found[q("pgjobs_table_rows_estimated", table="pgjobs_job")] >= 0


def test_openmetrics_when_the_scraper_asks_for_it(admin_client):
    job(queue="mail")
    response = admin_client.get(URL, HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


def test_anonymous_gets_401_and_staff_without_permission_403(client, staff_no_perms):
    response = client.get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"pgjobs_" not in response.content
    client.force_login(staff_no_perms)
    assert client.get(URL).status_code == 403
    # permission without staff status is not enough either (the admin's rule)
    client.force_login(make_user("not-staff", staff=False, perms=("view_job",)))
    assert client.get(URL).status_code == 403


def test_a_viewer_of_jobs_only_sees_no_dead_letters_nor_workers(client):
    seed_rows()
    client.force_login(make_user("jobs-only", perms=("view_job",)))
    names = {name for name, _ in samples(client.get(URL))}
    assert "pgjobs_jobs" in names
    assert not {"pgjobs_dead_letters", "pgjobs_workers_alive"} & names


def test_the_bearer_token_reads_everything_and_a_wrong_one_nothing(client):
    seed_rows()
    with with_token():
        found = samples(client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))
        assert found[q("pgjobs_dead_letters", queue="mail")] == 3
        assert found[q("pgjobs_workers_alive")] == 2
        assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    # no token configured: no bearer token opens it, not even an empty one
    assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_a_wrong_token_is_refused_even_for_a_logged_in_superuser(admin_client):
    with with_token():
        assert admin_client.get(URL, HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_only_reads(admin_client):
    assert admin_client.post(URL).status_code == 405


def test_a_short_token_is_a_configuration_error():
    with with_token():
        assert get_config().METRICS_TOKEN == TOKEN
    with with_token("short"), pytest.raises(ConfigError, match="at least 24 characters"):
        get_config()


def test_the_database_away_is_503_as_for_health(admin_client, monkeypatch):
    """Once a server error (and an error report) for every scrape."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once closed
    away = DatabaseWrapper({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": port})
    monkeypatch.setattr("django_pgjobs.views.jobs_connection", lambda alias=None: away)
    try:
        response = admin_client.get(URL)
    finally:
        away.close()
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/plain")


def test_a_token_read_from_a_secret_file_with_its_newline_works(client):
    """Mounted secrets end with a newline: once a configuration error for every enqueue."""
    with with_token(TOKEN + "\n"):
        get_config()
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200


def test_without_prometheus_client_the_endpoint_says_what_to_install(admin_client, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "django_pgjobs.prometheus", None)  # import raises
    response = admin_client.get(URL)
    assert response.status_code == 501
    assert b"django-pgjobs[prometheus]" in response.content


def test_a_scrape_of_a_big_table_runs_only_statements_shown_to_use_their_index(
    admin_client, monkeypatch
):
    """Above EXACT_COUNT_ROWS a scrape counts through indexes only: each statement it runs is
    one tests/test_indexes.py proves walks its index on a million rows, or reads a table of a
    handful of rows (the pauses, the worker registry, the planner's statistics)."""
    from test_indexes import EXPECTED_USERS

    from django_pgjobs import db, overview

    seed_rows()
    monkeypatch.setattr(overview, "EXACT_COUNT_ROWS", -1)  # as if pgjobs_job were big
    run: list[str] = []
    execute = db.execute

    def recording(connection, name, params=None):
        run.append(name)
        return execute(connection, name, params)

    monkeypatch.setattr(db, "execute", recording)
    found = samples(admin_client.get(URL))
    assert found[q("pgjobs_counts_estimated")] == 1
    assert found[q("pgjobs_jobs", queue="mail", state="running")] == 2  # still exact
    proven = set().union(*EXPECTED_USERS.values())
    # outbox_backlog counts at most outbox.status.COUNT_CAP rows and reads the oldest by the
    # primary key: bounded whatever the outbox's size
    assert set(run) - proven == {
        "paused_queues", "live_workers", "table_row_estimates", "outbox_backlog",
    }  # fmt: skip
