"""Who may read ``pgjobs/metrics`` and ``pgjobs/health``: never anyone anonymous.

A request is let in when it carries ``Authorization: Bearer <token>`` matching
``PGJOBS["METRICS_TOKEN"]`` (compared in constant time; a scraper's way in), or comes from an
active staff user who may view jobs (the admin's rule: the view or the change permission on
``Job``). Without either it gets 401 (with ``WWW-Authenticate: Bearer``); a logged-in user
without the permission, 403. A wrong token is a 401 even from a logged-in user.

What a user sees follows the admin dashboard: dead-letter counts only with a permission on
dead letters, worker counts only with one on workers. A token sees everything.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse

from .conf import get_config

BEARER = "bearer "


@dataclass(frozen=True)
class Reader:
    """What the request may see besides the jobs."""

    dead_letters: bool
    workers: bool


class Refused(Exception):
    """The request may not read: ``response()`` says so (401 or 403)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason

    def response(self) -> HttpResponse:
        response = HttpResponse(
            self.reason + "\n", status=self.status, content_type="text/plain; charset=utf-8"
        )
        if self.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="pgjobs"'
        response["Cache-Control"] = "no-store"
        return response


EVERYTHING = Reader(dead_letters=True, workers=True)


def authorize(request: HttpRequest) -> Reader:
    """The request's ``Reader``; ``Refused`` when it may not read."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header[: len(BEARER)].lower() == BEARER:
        if _token_matches(header[len(BEARER) :].strip()):
            return EVERYTHING
        raise Refused(401, "Unknown token.")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise Refused(401, "Log in as staff, or send Authorization: Bearer <METRICS_TOKEN>.")
    if not (user.is_active and user.is_staff and _may_view(user, "job")):
        raise Refused(403, "You may not view jobs.")
    return Reader(dead_letters=_may_view(user, "deadletter"), workers=_may_view(user, "worker"))


def _token_matches(given: str) -> bool:
    token = get_config().METRICS_TOKEN.strip()  # a secret file's newline is not part of it
    # compare_digest takes as long whatever the first difference; an unset token matches none
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


def _may_view(user, model: str) -> bool:
    return user.has_perm(f"django_pgjobs.view_{model}") or user.has_perm(
        f"django_pgjobs.change_{model}"
    )
