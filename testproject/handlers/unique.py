"""docs/howto/unique.md: jobs with unique keys (tests/test_unique.py runs them with real
``runjobs`` processes)."""

from __future__ import annotations

import time

from django.db.models import F

from django_pgjobs import job
from django_pgjobs.context import current_job
from testproject.demo.models import Counter, Execution


def _ran(label: str) -> None:
    running = current_job()
    Execution.objects.create(job_id=running.id, attempt=running.attempts, label=label, pid=0)


# One refresh of a report in flight (waiting or running) at a time: the default scope.
@job(queue="unique", unique_key=lambda report_id: f"report:{report_id}")
def refresh_report(report_id: int) -> None:
    _ran(f"report:{report_id}")


# Debounce: while a reindex of a document waits, a newer enqueue replaces its arguments and
# moves its run_after; the job runs once, with the last arguments, after the edits calm down.
@job(queue="unique", unique_key=lambda document_id, **_: f"reindex:{document_id}", debounce=True)
def reindex_document(document_id: int, title: str = "") -> None:
    _ran(f"reindex:{document_id}:{title}")


# Throttle: at most one sync of an account per 10 seconds, even after the last one finished.
@job(queue="unique", unique_key=lambda account_id: f"sync:{account_id}", throttle=10)
def sync_account(account_id: int) -> None:
    _ran(f"sync:{account_id}")


# The scope "waiting": one refresh may wait while another runs, so a change made during a
# refresh is never missed, and refreshes never pile up. Two refreshes may run at once: a worker
# takes the waiting one when it is due, even while the other still runs.
@job(queue="unique", unique_key=lambda **_: "refresh-prices", unique_scope="waiting")
def refresh_prices(hold: str = "") -> None:
    _ran("refresh-prices")
    if hold:  # the tests hold a refresh running until they release it
        while not Counter.objects.filter(name=hold, value__gt=0).exists():
            time.sleep(0.05)


# A job that reschedules itself with a fixed key: while it runs it holds the key, and enqueuing
# its own key hands the key over to the next run, so the chain goes on.
@job(queue="unique", unique_key=lambda rounds_left: "poll-inbox")
def poll_inbox(rounds_left: int) -> None:
    _ran(f"poll-inbox:{rounds_left}")
    Counter.objects.filter(name="polls").update(value=F("value") + 1)
    if rounds_left > 1:
        poll_inbox.using(delay=0.1).enqueue(rounds_left - 1)
