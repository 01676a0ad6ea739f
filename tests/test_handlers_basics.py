"""docs/howto/handlers.md, "A plain function", run by a real ``runjobs`` process."""

from __future__ import annotations

import pytest
from django.db import transaction

from testproject.demo.models import Counter
from testproject.handlers.basics import add_points

pytestmark = pytest.mark.django_db(transaction=True)


def test_plain_handler_runs_in_a_worker_process(start_worker):
    with transaction.atomic():
        Counter.objects.create(name="ada")
        add_points.enqueue("ada", 10)
    with transaction.atomic():
        Counter.objects.create(name="bob")
        add_points.enqueue("bob", 5)
        transaction.set_rollback(True)  # rolled back: neither the row nor the job exists
    worker = start_worker("--queue", "handlers", "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()
    assert Counter.objects.get(name="ada").value == 10
    assert not Counter.objects.filter(name="bob").exists()
