"""docs/howto/handlers.md, "A plain function": the shape every handler starts from."""

from __future__ import annotations

from django.db.models import F

from django_pgjobs import job
from testproject.demo.models import Counter


@job(queue="handlers", max_attempts=3)
def add_points(counter: str, points: int) -> None:
    # Arguments are JSON (ids, strings, numbers): load what the job needs from the database,
    # as it is when the job runs, not as it was when it was enqueued.
    Counter.objects.filter(name=counter).update(value=F("value") + points)
