"""docs/howto/repair.md, "Change a job's signature": payload versions.

Version 1 of ``award_points`` was ``award_points(counter, points)``; version 2 takes the amount
as a keyword and a reason. Jobs enqueued by the release before (still waiting, or dead letters
requeued later) are upgraded by the worker before the call.
"""

from __future__ import annotations

from django.db.models import F

from django_pgjobs import job
from testproject.demo.models import Counter


def upgrade_v1(args: list, kwargs: dict) -> tuple[list, dict]:
    """Version 1's ``(counter, points)`` as version 2's ``(counter, amount=..., reason=...)``."""
    counter, points = args
    return [counter], {"amount": points, "reason": "enqueued before version 2"}


@job(queue="handlers", version=2, upgrade={1: upgrade_v1})
def award_points(counter: str, *, amount: int, reason: str = "") -> None:
    Counter.objects.filter(name=counter).update(value=F("value") + amount)
