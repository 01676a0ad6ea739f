"""Queue statistics: workers add per-minute counts in one upsert; the dashboard reads them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from helpers import drain, run_worker

from django_pgjobs import metrics, operations
from django_pgjobs.admin.display import duration
from django_pgjobs.metrics import QueueCounts, wait_bucket
from django_pgjobs.models import QueueStat
from django_pgjobs.overview import percentile, queue_overview
from testproject.demo import jobs as demo

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_records_successes_retries_dead_and_waits_per_queue():
    for i in range(5):
        demo.record.enqueue(f"ok-{i}")
    demo.always_fails.enqueue("boom")  # 3 attempts: 2 retries, then dead
    demo.send_welcome_email.enqueue(0)  # queue "emails", atomic
    drain()
    # One row per queue per minute: a run that crosses a minute boundary writes two, so sum.
    stats: dict[str, list[int]] = {}
    for row in QueueStat.objects.all():
        total = stats.setdefault(row.queue, [0, 0, 0, 0])
        for index, value in enumerate(
            (row.succeeded, row.retried, row.dead_lettered, sum(row.wait_buckets))
        ):
            total[index] += value
    assert set(stats) == {"default", "emails"}
    # one wait sample per claim: 5 + 3 attempts
    assert stats["default"] == [5, 2, 1, 8]
    assert stats["emails"][0] == 1


def test_flushes_are_one_upsert_that_adds_up():
    counts = {"q": QueueCounts(succeeded=2, retried=1, dead_lettered=0)}
    counts["q"].wait_buckets[0] = 3
    operations.record_queue_stats(connection, counts)
    counts["q"].wait_buckets[5] = 1
    operations.record_queue_stats(connection, counts)
    (row,) = QueueStat.objects.all()
    assert (row.succeeded, row.retried) == (4, 2)
    assert row.wait_buckets[0] == 6 and row.wait_buckets[5] == 1


def test_a_failing_flush_never_stops_the_worker(monkeypatch, caplog):
    def broken(*args, **kwargs):
        from django.db import DatabaseError

        raise DatabaseError("statistics table gone")

    monkeypatch.setattr(operations, "record_queue_stats", broken)
    demo.record.enqueue("still runs")
    worker = run_worker()
    assert worker.stats.succeeded == 1
    assert "could not record queue statistics" in caplog.text


def test_percentiles_interpolate_inside_buckets():
    buckets = [0] * (len(metrics.WAIT_BUCKET_BOUNDS) + 1)
    assert percentile(buckets, 0.95) is None
    buckets[wait_bucket(0.3)] = 100  # all between 0.25 s and 0.5 s
    assert 0.25 < percentile(buckets, 0.95) <= 0.5
    buckets[-1] = 10  # a few waited more than an hour
    assert percentile(buckets, 0.99) == float("inf")
    assert wait_bucket(0) == 0 and wait_bucket(10_000) == len(metrics.WAIT_BUCKET_BOUNDS)


def record_minutes(queue: str, now, rows) -> None:
    """``rows``: (minutes before ``now``'s minute, succeeded, retried, dead-lettered, {bucket: claims})."""
    minute = now.replace(second=0, microsecond=0)
    for back, succeeded, retried, dead, waits in rows:
        buckets = [0] * (len(metrics.WAIT_BUCKET_BOUNDS) + 1)
        for index, count in waits.items():
            buckets[index] = count
        QueueStat.objects.create(
            queue=queue,
            minute=minute - timedelta(minutes=back),
            succeeded=succeeded,
            retried=retried,
            dead_lettered=dead,
            wait_buckets=buckets,
        )


QUARTER_SECOND = wait_bucket(0.3)  # claims that waited between 0.25 s and 0.5 s
OVER_AN_HOUR = len(metrics.WAIT_BUCKET_BOUNDS)
RECORDED = [
    (0, 9, 1, 0, {QUARTER_SECOND: 100}),  # the current minute, half gone
    (2, 18, 0, 0, {}),
    (5, 100, 0, 0, {}),  # before the throughput window
    (20, 0, 0, 0, {OVER_AN_HOUR: 50}),  # before the wait window
    (30, 20, 2, 1, {}),
    (70, 1000, 0, 1000, {}),  # before the hour
]


def test_throughput_divides_by_the_time_its_minutes_span():
    now = timezone.now().replace(second=30, microsecond=0)
    record_minutes("q", now, RECORDED)
    (queue,), _ = queue_overview(connection, now=now)
    assert queue.succeeded_5m == 27
    assert queue.throughput_seconds == 4 * 60 + 30  # four whole minutes and half the current
    assert queue.throughput_per_minute == pytest.approx(6.0)  # not 27 / 5


def test_failure_rate_and_wait_percentiles_from_recorded_minutes():
    now = timezone.now().replace(second=30, microsecond=0)
    record_minutes("q", now, RECORDED)
    (queue,), chart = queue_overview(connection, now=now)
    assert (queue.succeeded_60m, queue.failed_60m) == (147, 4)
    assert queue.failure_rate == pytest.approx(4 / 151)
    assert queue.wait_samples == 100  # the last 15 minutes only
    assert queue.wait_p95 == pytest.approx(0.25 + 0.25 * 0.95)
    assert queue.wait_p99 == pytest.approx(0.25 + 0.25 * 0.99)
    assert sum(s for _, s, _ in chart) == 147 and sum(f for _, _, f in chart) == 4


def test_dashboard_shows_the_recorded_rates(admin_client):
    # The minutes are recorded against the clock of the request; a minute may turn in between,
    # which moves every row one minute back: the rows were placed so that changes nothing here.
    record_minutes("q", timezone.now(), RECORDED)
    (row,) = admin_client.get(reverse("admin:django_pgjobs_job_dashboard")).context["rows"]
    assert row["failure_rate"] == "2.6 %"
    assert (row["p95"], row["p99"]) == (duration(0.4875), duration(0.4975))
    assert row["queue"].succeeded_60m == 147


def test_dashboard_shows_a_real_worker_and_what_it_did(start_worker, client, django_user_model):
    import signal

    from django.urls import reverse
    from helpers import wait_until

    from django_pgjobs.models import Job, Worker

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    demo.record.enqueue_many([(f"seen-{i}",) for i in range(20)])
    worker = start_worker("--concurrency", "2")
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    wait_until(lambda: QueueStat.objects.filter(queue="default", succeeded=20).exists(), timeout=30)
    page = client.get(reverse("admin:django_pgjobs_job_dashboard"))
    (row,) = [r for r in page.context["rows"] if r["queue"].name == "default"]
    assert row["queue"].succeeded_60m == 20 and row["p95"] != "–"
    (registered,) = Worker.objects.all()
    assert registered.pid == worker.pid
    assert page.context["workers_alive"] == 1
    assert f">{worker.pid}<" in page.content.decode()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert not Worker.objects.exists()  # a stopped worker leaves the registry


def test_dashboard_shows_a_worker_waiting_on_a_queue_no_job_has_used(
    start_worker, client, django_user_model
):
    import signal

    from django.urls import reverse
    from helpers import wait_until

    from django_pgjobs.models import Worker

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    demo.record.using(queue="emails").enqueue("waits in emails")
    typo = start_worker("--queue", "email", "--queue", "emails")
    wait_until(lambda: Worker.objects.exists(), timeout=60)

    page = client.get(reverse("admin:django_pgjobs_job_dashboard"))

    (row,) = page.context["workers"]
    assert row["unused"] == ["email"]
    assert "no job has used email<" in page.content.decode()
    typo.signal(signal.SIGTERM)
    assert typo.wait(30) == 0
