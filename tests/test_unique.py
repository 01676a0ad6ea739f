"""Unique keys (django_pgjobs/uniqueness.py, docs/howto/unique.md): the scope, debounce and
throttle, each decided by one statement; what each enqueue did (``job.enqueue_outcome``)."""

from __future__ import annotations

import pytest

from django_pgjobs import EnqueueOutcome
from django_pgjobs.models import Job, ThrottleWindow
from testproject.handlers.unique import (
    refresh_prices,
    refresh_report,
    reindex_document,
    sync_account,
)

pytestmark = pytest.mark.django_db(transaction=True)

CREATED, REPLACED, SKIPPED = EnqueueOutcome.CREATED, EnqueueOutcome.REPLACED, EnqueueOutcome.SKIPPED


def test_smoke():
    a = refresh_report.enqueue(1)
    b = refresh_report.enqueue(1)
    assert (a.enqueue_outcome, b.enqueue_outcome, a.pk) == (CREATED, SKIPPED, b.pk)
    c = reindex_document.enqueue(5, title="a")
    d = reindex_document.using(delay=30).enqueue(5, title="b")
    assert (c.enqueue_outcome, d.enqueue_outcome, c.pk) == (CREATED, REPLACED, d.pk)
    assert Job.objects.get(pk=c.pk).kwargs == {"title": "b"}
    e = sync_account.enqueue(3)
    f = sync_account.enqueue(3)
    assert (e.enqueue_outcome, f.enqueue_outcome) == (CREATED, SKIPPED)
    assert ThrottleWindow.objects.count() == 1
    g = refresh_prices.enqueue()
    h = refresh_prices.enqueue()
    assert (g.enqueue_outcome, h.enqueue_outcome, g.pk) == (CREATED, SKIPPED, h.pk)
    assert g.waiting_key == "refresh-prices"
