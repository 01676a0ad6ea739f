"""Tracing (docs/howto/tracing.md): a trace goes from the request that enqueued a job to each
attempt of it, run by a real worker; nothing changes without OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection
from helpers import ROOT, drain, run_worker
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_pgjobs import tracing
from django_pgjobs.models import Job
from testproject.demo.jobs import flaky
from testproject.handlers.tracing import build_report

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test, kept in memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the SDK, set up once per process
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # keeps no more spans


def named(spans: InMemorySpanExporter, name: str) -> list:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_a_trace_goes_from_the_request_to_the_jobs_span(client, spans):
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /") as request_span:
        response = client.post("/", {"email": "ada@example.com"})  # enqueues the welcome email
    assert response.status_code == 302
    row = Job.objects.get(name="testproject.demo.jobs.send_welcome_email")
    assert (
        row.trace_context["traceparent"].split("-")[1]
        == f"{request_span.get_span_context().trace_id:032x}"
    )

    run_worker(queues=["emails"])

    (job_span,) = named(spans, "run testproject.demo.jobs.send_welcome_email")
    request = request_span.get_span_context()
    assert job_span.context.trace_id == request.trace_id
    assert job_span.parent.span_id == request.span_id
    assert job_span.kind == trace.SpanKind.CONSUMER
    assert dict(job_span.attributes) == {
        "messaging.system": "django_pgjobs",
        "messaging.operation.type": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(row.id),
        "pgjobs.job.name": "testproject.demo.jobs.send_welcome_email",
        "pgjobs.job.attempt": 1,
        "pgjobs.job.max_attempts": 5,
        "pgjobs.job.outcome": "succeeded",
    }


def test_the_jobs_own_spans_are_children_of_its_attempt(spans):
    with trace.get_tracer("tests").start_as_current_span("nightly"):
        build_report.enqueue(42)
    run_worker(queues=["reports"])
    (attempt,) = named(spans, "run testproject.handlers.tracing.build_report")
    (render,) = named(spans, "render report")
    assert render.parent.span_id == attempt.context.span_id
    assert render.attributes["report.id"] == 42


def test_each_attempt_is_a_span_of_the_same_trace_with_its_outcome(spans):
    with trace.get_tracer("tests").start_as_current_span("request") as request_span:
        flaky.enqueue("traced", fail_times=1)
    drain()  # the first attempt fails, the retry succeeds
    attempts = sorted(
        named(spans, "run testproject.demo.jobs.flaky"),
        key=lambda span: span.attributes["pgjobs.job.attempt"],
    )
    assert [
        (s.attributes["pgjobs.job.attempt"], s.attributes["pgjobs.job.outcome"]) for s in attempts
    ] == [
        (1, "retrying"),
        (2, "succeeded"),
    ]
    request = request_span.get_span_context()
    assert {s.parent.span_id for s in attempts} == {request.span_id}
    assert attempts[0].status.status_code == trace.StatusCode.ERROR
    assert attempts[0].events[0].attributes["exception.type"] == "ConnectionError"


def test_a_dead_lettered_attempt_says_so(spans):
    from testproject.demo.jobs import always_fails

    always_fails.using(max_attempts=1).enqueue()
    run_worker(queues=["default"])
    (attempt,) = named(spans, "run testproject.demo.jobs.always_fails")
    assert attempt.attributes["pgjobs.job.outcome"] == "dead_lettered"
    assert attempt.parent is None  # enqueued outside any span: the attempt starts a trace


def test_without_opentelemetry_nothing_is_stored_nor_traced(spans, monkeypatch):
    monkeypatch.setattr(tracing, "_otel", False)  # what an ImportError leaves
    with trace.get_tracer("tests").start_as_current_span("request"):
        build_report.enqueue(7)
    with connection.cursor() as cursor:
        cursor.execute("SELECT trace_context FROM pgjobs_job")
        assert cursor.fetchall() == [(None,)]
    run_worker(queues=["reports"])
    assert named(spans, "run testproject.handlers.tracing.build_report") == []
    assert not Job.objects.exists()


def test_without_a_current_span_enqueue_stores_no_context(spans):
    build_report.enqueue(8)
    assert Job.objects.get().trace_context is None


def test_django_pgjobs_never_imports_opentelemetry_by_itself():
    code = (
        "import sys, django; django.setup(); "
        "import django_pgjobs.worker, django_pgjobs.enqueueing, django_pgjobs.tracing; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_the_sdk_check_reads_the_apis_global_and_falls_back_to_its_call(monkeypatch):
    """``attempt_started`` runs for every job: it reads the API's global provider instead of
    calling ``get_tracer_provider()`` (an ``os.environ`` lookup per call until one is set)."""
    tracing._api()
    monkeypatch.setattr(tracing, "_provider_from_environment", False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    assert tracing._sdk_set_up(trace) is False
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace.NoOpTracerProvider())
    assert tracing._sdk_set_up(trace) is False
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", TracerProvider())
    assert tracing._sdk_set_up(trace) is True
    # a provider named in OTEL_PYTHON_TRACER_PROVIDER: the API's own call loads it
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(tracing, "_provider_from_environment", True)
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    assert tracing._sdk_set_up(trace) is True
    # an API without the global: its call decides
    monkeypatch.delattr(trace, "_TRACER_PROVIDER")
    monkeypatch.setattr(tracing, "_provider_from_environment", False)
    assert tracing._sdk_set_up(trace) is True
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    assert tracing._sdk_set_up(trace) is False
