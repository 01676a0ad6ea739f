# tests/test_monitor_howto.py
import pytest
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "a-long-random-token-from-secrets-0123"


@pytest.mark.django_db
def test_prometheus_can_read_the_jobs(client, settings):
    settings.PGJOBS = {**settings.PGJOBS, "METRICS_TOKEN": TOKEN}
    response = client.get("/pgjobs/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    families = text_string_to_metric_families(response.content.decode())
    assert "pgjobs_jobs" in {family.name for family in families}


# Not shown on the page: docs/howto/monitor.md says what the endpoint serves. Its list of series
# is the scrape's, and its Prometheus configuration and alert rules name only series that exist.

import json  # noqa: E402
import re  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402
from admin_data import dead_letter, job  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from django_pgjobs.metrics import WAIT_BUCKET_BOUNDS  # noqa: E402
from django_pgjobs.models import QueueStat, Worker  # noqa: E402

PAGE = Path(__file__).resolve().parent.parent / "docs" / "howto" / "monitor.md"


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


@pytest.fixture
def every_series(client, settings) -> set[str]:
    """The families of a scrape of a queue with a row behind every series."""
    now = timezone.now()
    job(queue="mail", run_after=now - timedelta(seconds=30))
    dead_letter(queue="mail", failed_at=now)
    waits = [1] * (len(WAIT_BUCKET_BOUNDS) + 1)
    QueueStat.objects.create(queue="mail", minute=now, succeeded=1, wait_buckets=waits)
    Worker.objects.create(id="w", hostname="h", pid=1, queues=[], concurrency=1)
    settings.PGJOBS = {**settings.PGJOBS, "METRICS_TOKEN": TOKEN}
    response = client.get("/pgjobs/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    return {family.name for family in text_string_to_metric_families(response.content.decode())}


@pytest.mark.django_db
def test_the_page_lists_every_series_and_no_other(every_series):
    listed = set(re.findall(r"^\| `(pgjobs_\w+)` \|", PAGE.read_text(), re.M))
    # pgjobs_database_up: with queues on several databases only (tests/test_databases_admin.py)
    assert listed - {"pgjobs_database_up"} == every_series


@pytest.mark.django_db
def test_the_alert_rules_name_series_that_exist(every_series):
    [rules] = [yaml.safe_load(block) for block in fenced("yaml") if "groups:" in block]
    alerts = {rule["alert"]: rule["expr"] for rule in rules["groups"][0]["rules"]}
    assert {"PgjobsBacklogLate", "PgjobsDeadLettersGrowing", "PgjobsNoLiveWorker"} <= set(alerts)
    for expr in alerts.values():
        assert set(re.findall(r"\bpgjobs_\w+", expr)) <= every_series, expr


def test_the_scrape_configuration_points_at_the_endpoint_with_the_token():
    [config] = [yaml.safe_load(block) for block in fenced("yaml") if "scrape_configs" in block]
    [scrape] = config["scrape_configs"]
    assert scrape["metrics_path"] == "/" + reverse("pgjobs:metrics").lstrip("/")
    assert scrape["authorization"]["type"] == "Bearer"


def test_the_health_body_shown_is_what_the_endpoint_says():
    from django_pgjobs.health import Health

    [shown] = [json.loads(block) for block in fenced("json")]
    assert shown == Health(queues_without_worker=("emails",)).body(details=True)
