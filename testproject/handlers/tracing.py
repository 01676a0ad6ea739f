"""docs/howto/tracing.md: a job whose own spans join the trace of the request that enqueued it.
Imported by the tests that run it (not in JOB_MODULES: other tests' workers never import
OpenTelemetry)."""

from __future__ import annotations

from opentelemetry import trace

from django_pgjobs import job

tracer = trace.get_tracer("reports")


@job(queue="reports")
def build_report(report_id: int) -> None:
    # The attempt's span is current while the job runs: this span is its child.
    with tracer.start_as_current_span("render report") as span:
        span.set_attribute("report.id", report_id)
