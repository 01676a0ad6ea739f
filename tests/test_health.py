"""``pgjobs/health``: 503 while a queue with due jobs has no live worker (real ``runjobs``
processes), its oldest due job waited too long, or the database is away; 200 otherwise. Never
anonymous unless ``HEALTH_PUBLIC``, and then without a queue name or a number."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest
from admin_data import job
from django.conf import settings
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from helpers import wait_until

from django_pgjobs import views
from django_pgjobs.health import check_health
from django_pgjobs.models import Job, QueueState, Worker
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/pgjobs/health"


@pytest.fixture(autouse=True)
def no_cached_public_result():
    """Anonymous public reads share a result for 5 s per process: none from another test."""
    views._public_cache.clear()
    yield
    views._public_cache.clear()


def health(client) -> tuple[int, dict]:
    response = client.get(URL)
    assert response["Content-Type"] == "application/json"
    return response.status_code, json.loads(response.content)


def pgjobs_settings(**changes):
    return override_settings(PGJOBS={**settings.PGJOBS, **changes})


def live_worker(queues: list[str]) -> Worker:
    return Worker.objects.create(
        id=f"web-1:1:{len(queues)}", hostname="web-1", pid=1, queues=queues, concurrency=1
    )


def test_503_without_a_live_worker_for_due_jobs_and_200_with_one(admin_client, start_worker):
    assert health(admin_client) == (200, {"status": "ok", "checks": CHECKS_OK})
    # a running job holds the only slot (no prefetch), so the next one stays due meanwhile
    demo.record.using(queue="hq").enqueue("blocker", sleep=60)
    demo.record.using(queue="hq").enqueue("waits")
    status, body = health(admin_client)
    assert status == 503
    assert body["checks"] == {**CHECKS_OK, "workers": "failing"}
    assert body["queues_without_worker"] == ["hq"]

    start_worker("--queue", "elsewhere")  # alive, but serves another queue
    wait_until(lambda: Worker.objects.exists(), timeout=60)
    assert health(admin_client)[0] == 503

    start_worker("--queue", "hq", "--concurrency", "1", "--prefetch", "0")
    wait_until(lambda: Job.objects.filter(status="running").exists(), timeout=60)
    assert Job.objects.filter(status="ready", queue="hq").count() == 1  # still due
    assert health(admin_client) == (200, {"status": "ok", "checks": CHECKS_OK})


CHECKS_OK = {"database": "ok", "workers": "ok", "backlog": "ok"}


def test_due_jobs_waiting_on_a_flow_key_need_a_worker_too(admin_client):
    """A queue whose jobs all wait on flow keys (a rate limit, fairness) is left out of the
    backlog's lateness, not out of the workers check: with no worker it is served by no one."""
    from testproject.handlers import flow

    flow.call_partner.enqueue(1)  # queue "flow", rate-limited: its job has a flow key
    flow.sync_order.using(concurrency_key="order:1", delay=3600).enqueue(1, 0)
    status, body = health(admin_client)
    assert (status, body["queues_without_worker"]) == (503, ["flow"])
    live_worker(["flow"])
    assert health(admin_client) == (200, {"status": "ok", "checks": CHECKS_OK})
    Job.objects.filter(name=flow.call_partner.name).delete()  # only a job due in an hour left
    Worker.objects.all().delete()
    assert health(admin_client) == (200, {"status": "ok", "checks": CHECKS_OK})


def test_503_when_the_oldest_due_job_waited_past_the_threshold(admin_client):
    live_worker([])
    job(queue="late", run_after=timezone.now() - timedelta(seconds=200))
    assert health(admin_client)[0] == 200  # under the default 300 s
    with pgjobs_settings(HEALTH_MAX_DUE_AGE_SECONDS=100):
        status, body = health(admin_client)
    assert status == 503
    assert body["checks"] == {**CHECKS_OK, "backlog": "failing"}
    assert 200 <= body["oldest_due_seconds"]["late"] < 260


def test_a_paused_queue_fails_no_check(admin_client):
    QueueState.objects.create(name="held", paused=True)
    job(queue="held", run_after=timezone.now() - timedelta(hours=1))
    assert health(admin_client)[0] == 200


def test_a_database_that_does_not_answer_is_503():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once closed
    away = DatabaseWrapper({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": port})
    try:
        result = check_health(away, 300)
    finally:
        away.close()
    assert not result.ok
    assert result.body(details=True)["checks"] == {
        "database": "failing",
        "workers": "unknown",
        "backlog": "unknown",
    }


def test_never_anonymous_unless_public_and_then_without_names(client, staff_no_perms):
    job(queue="secret-queue-name", run_after=timezone.now() - timedelta(hours=1))
    response = client.get(URL)
    assert response.status_code == 401
    client.force_login(staff_no_perms)
    assert client.get(URL).status_code == 403
    client.logout()
    with pgjobs_settings(HEALTH_PUBLIC=True):
        status, body = health(client)
    assert status == 503
    assert body == {
        "status": "failing",
        "checks": {"database": "ok", "workers": "failing", "backlog": "failing"},
    }


def test_anonymous_public_reads_share_one_check_for_a_few_seconds(admin_client):
    """Anyone may send them: a flood costs one check per 5 s, not one per request."""
    client = Client()  # anonymous (admin_client is the logged-in ``client`` fixture)
    job(queue="q1")
    with pgjobs_settings(HEALTH_PUBLIC=True):
        with CaptureQueriesContext(connection) as first:
            assert health(client)[0] == 503
        with CaptureQueriesContext(connection) as second:
            assert health(client)[0] == 503
        with CaptureQueriesContext(connection) as staff:
            assert health(admin_client)[0] == 503  # a reader with details: checked each time
    assert len(first) > 0 and len(second) == 0 and len(staff) > 0


def test_the_token_reads_the_details(client):
    token = "a-health-token-0123456789-abcdef"
    job(queue="q1")
    with pgjobs_settings(METRICS_TOKEN=token):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 503
    assert json.loads(response.content)["queues_without_worker"] == ["q1"]


def test_with_atomic_requests_a_database_that_does_not_answer_is_503_not_a_server_error(
    client, monkeypatch
):
    """``ATOMIC_REQUESTS = True`` wraps every view in a transaction, whose opening needs the
    database: health and metrics answered Django's 500 page when it was away."""
    token = "a-health-token-0123456789-abcdef"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once closed
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    monkeypatch.setitem(connection.settings_dict, "PORT", str(port))
    try:
        with pgjobs_settings(METRICS_TOKEN=token):
            client.raise_request_exception = False
            bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
            response = client.get(URL, **bearer)
            metrics = client.get("/pgjobs/metrics", **bearer)
    finally:
        connection.close()
    assert response.status_code == 503, response.content[:300]
    assert json.loads(response.content)["checks"]["database"] == "failing"
    assert metrics.status_code == 503, metrics.content[:300]
    assert b"the jobs database is unavailable" in metrics.content
