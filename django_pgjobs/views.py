"""The two read-only endpoints of ``include("django_pgjobs.urls")``: ``metrics`` and
``health``. Who may read them: ``access``; what they say: ``prometheus`` and ``health``.

Both are outside ``ATOMIC_REQUESTS``: its transaction opens before the view runs, so with the
database away they would answer Django's 500 instead of their 503; they only read."""

from __future__ import annotations

import time

from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from . import access
from .conf import get_config, job_databases
from .db import JobsTableMissing, jobs_connection
from .health import check_every_database

MISSING_CLIENT = "pgjobs/metrics needs prometheus_client: pip install 'django-pgjobs[prometheus]'\n"


@never_cache
@transaction.non_atomic_requests
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    try:
        reader = access.authorize(request)
    except access.Refused as refused:
        return refused.response()
    try:
        from .prometheus import exposition
    except ImportError:  # the optional extra is not installed
        return HttpResponse(MISSING_CLIENT, status=501, content_type="text/plain; charset=utf-8")
    try:
        body, content_type = exposition(
            [(alias, jobs_connection(alias)) for alias in job_databases()],
            reader,
            request.META.get("HTTP_ACCEPT", ""),
        )
    except (DatabaseError, JobsTableMissing) as error:  # as health: 503, not a server error
        message = f"pgjobs/metrics: the jobs database is unavailable ({type(error).__name__})\n"
        return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    return HttpResponse(body, content_type=content_type)


@never_cache
@transaction.non_atomic_requests
@require_safe
def health(request: HttpRequest) -> HttpResponse:
    config = get_config()
    try:
        access.authorize(request)
        details = True
    except access.Refused as refused:
        if not config.HEALTH_PUBLIC:
            return refused.response()
        details = False
    result = _public_result(config) if not details else None
    if result is None:
        result = check_every_database(config.HEALTH_MAX_DUE_AGE_SECONDS)
        if not details:
            _public_cache[:] = [time.monotonic(), result]
    return JsonResponse(result.body(details), status=200 if result.ok else 503)


#: Anonymous reads of a public ``pgjobs/health`` share one result for this long per process:
#: the checks read every queue, and anyone may send requests.
PUBLIC_HEALTH_CACHE_SECONDS = 5.0
_public_cache: list = []  # [monotonic time, HealthResult] of the last anonymous check


def _public_result(config):
    """The last anonymous check's result while it is fresh, for an anonymous reader."""
    if _public_cache and time.monotonic() - _public_cache[0] < PUBLIC_HEALTH_CACHE_SECONDS:
        return _public_cache[1]
    return None
