"""A stand-in for a partner's HTTP API, for the examples of testproject/handlers/retries.py.

Each call is counted in the ``Counter`` row of the account (its ``value``), so tests can tell
how many times a job called. What the partner answers depends on the account's name:
``limited-N`` answers "429 Too Many Requests, Retry-After: 3" to the first N calls, then OK;
``down`` is always unavailable (503); ``rejected`` refuses the request (400); ``odd`` fails with
an error nobody planned for; anything else is OK.
"""

from __future__ import annotations

from django.db.models import F

from testproject.demo.models import Counter


class RateLimited(Exception):
    """429: come back after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429 Too Many Requests (Retry-After: {retry_after:g})")
        self.retry_after = retry_after


class Unavailable(Exception):
    """503: the partner is down for now."""


class Rejected(Exception):
    """400: the request itself is wrong; sending it again cannot help."""


def push(account: str) -> int:
    """Send ``account``'s points; returns how many calls the partner has seen for it."""
    Counter.objects.filter(name=account).update(value=F("value") + 1)
    calls = Counter.objects.get(name=account).value
    if account.startswith("limited-") and calls <= int(account.removeprefix("limited-")):
        raise RateLimited(retry_after=3)
    if account == "down":
        raise Unavailable("503 Service Unavailable")
    if account == "rejected":
        raise Rejected("400 Bad Request: unknown account")
    if account == "odd":
        raise KeyError("points")
    return calls
