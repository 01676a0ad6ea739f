"""docs/howto/handlers.md, "Retries by exception": Retry, Discard, retry_on and discard_on."""

from __future__ import annotations

from django_pgjobs import Discard, Retry, job
from testproject.demo.models import Counter
from testproject.handlers import partner


@job(queue="handlers", max_attempts=3)
def sync_account(account: str) -> None:
    try:
        partner.push(account)
    except partner.RateLimited as error:
        # The partner says when to come back (a 429's Retry-After): run again after that long.
        # This attempt counts: after max_attempts the job is dead-lettered.
        raise Retry(after=error.retry_after, reason=str(error)) from error


@job(queue="handlers", max_attempts=5, retry_on=(partner.Unavailable,))
def sync_when_up(account: str) -> None:
    # Only Unavailable is worth another attempt (with the usual backoff); any other exception
    # dead-letters the job at once.
    partner.push(account)


@job(queue="handlers", max_attempts=5, discard_on=(partner.Rejected,))
def sync_unless_rejected(account: str) -> None:
    # A Rejected request is dead-lettered at once; other exceptions are retried as usual.
    partner.push(account)


@job(queue="handlers", max_attempts=5)
def close_account(account: str) -> None:
    if not Counter.objects.filter(name=account).exists():
        # Nothing another attempt could change: dead-letter now, with this as the reason.
        raise Discard(f"no account {account!r}: nothing to close")
    Counter.objects.filter(name=account).delete()
