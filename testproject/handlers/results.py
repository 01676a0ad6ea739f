"""docs/howto/handlers.md, "Results": jobs whose return value is kept, read with get_result."""

from __future__ import annotations

from datetime import datetime, timezone

from django.db.models import F

from django_pgjobs import job
from testproject.demo.models import Counter


@job(queue="handlers", keep_result=True)
def count_words(text: str) -> dict:
    # The return value is kept as JSON: same rules as arguments (strings, numbers, lists, dicts).
    words = text.split()
    return {"words": len(words), "longest": max(words, key=len, default="")}


@job(queue="handlers", atomic=True, keep_result=True)
def add_and_report(counter: str, points: int) -> int:
    # atomic: the update, the result and the completion commit together
    Counter.objects.filter(name=counter).update(value=F("value") + points)
    return Counter.objects.get(name=counter).value


@job(queue="handlers", max_attempts=2)
def checked_at(counter: str) -> str:
    # Not declared with keep_result: a caller may ask per call, .using(keep_result=True).
    return f"{counter} checked at {datetime.now(timezone.utc).isoformat()}"


@job(queue="handlers", keep_result=True)
def report_time() -> datetime:
    # A datetime is not JSON: the attempt fails ("the return value is a datetime.datetime,
    # which is not JSON") and the job is dead-lettered at once, never run again for it.
    return datetime.now(timezone.utc)
