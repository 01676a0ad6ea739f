"""docs/howto/django-tasks.md: enqueueing a ``django.tasks`` task with the data it needs, and
reading its result later, as a view or a service function would."""

from __future__ import annotations

from django.db import transaction

from testproject.demo.models import Counter
from testproject.handlers.tasks import add_points


def award(counter: str, points: int) -> str:
    with transaction.atomic():
        Counter.objects.get_or_create(name=counter)
        # One INSERT in this transaction: the task exists exactly if the counter does.
        result = add_points.enqueue(counter, points)
    return result.id  # keep it to read the result later


def points_after(result_id: str) -> int | None:
    result = add_points.get_result(result_id)  # TaskResultDoesNotExist once pruned
    if result.status == "SUCCESSFUL":
        return result.return_value
    return None  # READY, RUNNING (or waiting for a retry), or FAILED: see result.errors
