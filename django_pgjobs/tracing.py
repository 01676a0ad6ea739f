"""Tracing with OpenTelemetry, when ``opentelemetry-api`` is installed (docs/howto/tracing.md).

``enqueue()`` stores the current trace context on the job's row (``trace_context``: the
propagator's carrier, W3C ``traceparent`` by default); the worker runs each attempt of the job in
a span whose parent is that context, so a trace goes from the request that enqueued the job to
every attempt of it (a retry is a further span of the same trace). The span is current while the
function runs (its own spans are children) and ends when the worker has recorded the attempt's
outcome, with the job's name, id, queue, attempt and outcome as attributes.

Without ``opentelemetry-api`` nothing changes: no import, no column written, ``attempt_started``
returns None at the cost of one attribute read. With the API but no SDK set up in the worker's
process (no tracer provider), no span is made either. ``opentelemetry`` is imported on first use, so a
process that never enqueues nor runs a job never imports it.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: Span attributes (``pgjobs.*`` for what the messaging conventions have no name for).
JOB_NAME = "pgjobs.job.name"
ATTEMPT = "pgjobs.job.attempt"
MAX_ATTEMPTS = "pgjobs.job.max_attempts"
OUTCOME = "pgjobs.job.outcome"

#: The outcomes of an attempt: ``succeeded``, ``retrying``, ``dead_lettered``, ``handed_back``
#: (its first statement found its connection dead: no attempt spent), ``lost`` (its lease
#: expired and another worker holds the job now).
SUCCEEDED, RETRYING, DEAD_LETTERED, HANDED_BACK, LOST = (
    "succeeded",
    "retrying",
    "dead_lettered",
    "handed_back",
    "lost",
)

_otel: Any = None  # the opentelemetry modules once looked for; False when not installed
_NO_SDK: tuple = ()  # the API's tracer providers that only make no-op spans
_UNKNOWN = object()
_provider_from_environment = False  # OTEL_PYTHON_TRACER_PROVIDER set when the API was loaded


def _api():
    """The ``opentelemetry`` API (a namespace of its modules), or None when not installed."""
    global _otel
    if _otel is None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _otel = False
        else:
            global _NO_SDK, _provider_from_environment
            _NO_SDK = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
            _provider_from_environment = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
            _otel = (context, propagate, trace, trace.get_tracer("django_pgjobs"))
    return _otel or None


def current_context() -> dict[str, str] | None:
    """The current trace context as a carrier (``{"traceparent": ...}``), to store on a job's
    row; None when OpenTelemetry is not installed or no span is active."""
    api = _api()
    if api is None:
        return None
    _context, propagate, trace, _tracer = api
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def enqueue_params() -> dict[str, Any]:
    """The row's values for enqueue: ``trace_context`` (the carrier, for the ``Job`` returned)
    and ``trace_context_json`` (its JSON text, for the INSERT); both None without a context."""
    carrier = current_context()
    return {
        "trace_context": carrier,
        "trace_context_json": None if carrier is None else json.dumps(carrier),
    }


def attempt_started(job) -> object | None:
    """(The thread or task running the job.) Start the span of this attempt, child of the
    trace context stored on the row, and make it current; ``job.span`` holds it until
    ``attempt_ended``. Returns the token for ``leave`` (None without OpenTelemetry)."""
    api = _api()
    if api is None:
        return None
    context, propagate, trace, tracer = api
    if not _sdk_set_up(trace):
        return None  # no SDK set up in this process: every span would be a no-op
    parent = None
    if job.trace_context:
        carrier = job.trace_context
        if isinstance(carrier, str):
            try:
                carrier = json.loads(carrier)
            except ValueError:
                carrier = None
        if isinstance(carrier, dict):
            parent = propagate.extract({str(k): str(v) for k, v in carrier.items()})
    job.span = tracer.start_span(
        f"run {job.name}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "django_pgjobs",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            JOB_NAME: job.name,
            ATTEMPT: job.attempts,
            MAX_ATTEMPTS: job.max_attempts,
        },
    )
    return context.attach(trace.set_span_in_context(job.span))


def _sdk_set_up(trace) -> bool:
    """Whether a tracer provider that records spans is set, at the cost of an attribute read
    per job. ``trace.get_tracer_provider()`` looks ``OTEL_PYTHON_TRACER_PROVIDER`` up in
    ``os.environ`` on every call until a provider is set (0.8 µs, a few per cent of a no-op
    job); the API's global is read instead, and the environment only once. Should the API
    drop that global, the public call is made."""
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _provider_from_environment:
        return False  # none set in code, none to load from the environment
    if provider is None or provider is _UNKNOWN:
        provider = trace.get_tracer_provider()
    return not isinstance(provider, _NO_SDK)


def leave(token: object | None) -> None:
    """(Where ``attempt_started`` ran.) The span is no longer current; it stays open."""
    if token is not None:
        _api()[0].detach(token)


def outcome(job, value: str) -> None:
    """Record the attempt's outcome on its span (the dispatcher, once it is decided)."""
    span = getattr(job, "span", None)
    if span is not None:
        span.set_attribute(OUTCOME, value)


def attempt_ended(job, error: BaseException | None = None, default: str = LOST) -> None:
    """End the attempt's span (once): with ``error`` recorded, the outcome ``default`` unless
    one was recorded."""
    span = getattr(job, "span", None)
    if span is None:
        return
    job.span = None
    trace = _api()[2]
    if span.is_recording() and OUTCOME not in (getattr(span, "attributes", None) or {}):
        span.set_attribute(OUTCOME, default)
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}"))
    span.end()
