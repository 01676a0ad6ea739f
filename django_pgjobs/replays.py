"""Staggered replays from a shell: ``manage.py pgjobs requeue --rate 50/s``.

The admin's "Replay over time" (``admin.repairs.replay_over_time``) for a selection of any size:
the same statement (``operations.requeue_dead_letters_spread``), ``BULK_LIMIT`` dead letters at a
time, each batch continuing the schedule of the one before, and the same message ("Scheduled
1,000 jobs at 50/s: the first is due now, the last at ..."). See docs/howto/repair.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from . import console, operations, repair
from .admin import display, repairs
from .admin.base import BULK_LIMIT, plural


def replay(
    selection: console.Selection, rate: repair.Rate, dry_run: bool = False
) -> console.Outcome:
    """The admin's "Replay over time" on the dead letters of ``selection``: requeued as jobs due
    one every ``1 / rate`` seconds, oldest first, the first now; ``BULK_LIMIT`` per statement
    (``operations.requeue_dead_letters_spread``), each batch's first job due one spacing after
    the previous batch's last, so the rate holds from batch to batch. ``console.BadInput`` when no dead
    letter matches. ``dry_run``: how many, and when the last would run."""
    queryset = console.dead_letters_of(selection)
    if not queryset.exists():
        raise console.BadInput(
            "no dead letter matches the ids and filters given: nothing scheduled"
        )
    spacing = 1 / rate.per_second
    if dry_run:
        selected = queryset.count()
        seconds = (selected - 1) * spacing
        last = display.local(timezone.now() + timedelta(seconds=seconds))
        return console.Outcome(
            f"Would schedule {plural(selected, 'job')} at {rate.text}: the first due now, the "
            f"last at about {last:%Y-%m-%d %H:%M:%S} (in {display.duration(seconds)}).",
            selected,
            dry_run=True,
        )
    conn = console.connection()
    # the dead letters selected now, not a job's new one when it fails again (console.act)
    newest = queryset.order_by("-id").values_list("id", flat=True).first() or 0
    ordered = (
        queryset.filter(id__lte=newest).order_by("failed_at", "id").values_list("failed_at", "id")
    )
    scheduled: list[tuple[int, datetime]] = []
    previous: datetime | None = None
    selected = 0
    batch = list(ordered[:BULK_LIMIT])
    while batch:
        selected += len(batch)
        done = operations.requeue_dead_letters_spread(
            conn,
            [i for _, i in batch],
            spacing,
            requested_by=console.COMMAND,
            previous_due=previous,
        )
        previous = max((due for _, due in done), default=previous)
        scheduled += done
        failed_at, last_id = batch[-1]
        later = Q(failed_at__gt=failed_at) | Q(failed_at=failed_at, id__gt=last_id)
        batch = list(ordered.filter(later)[:BULK_LIMIT])
    skipped = max(selected, len(selection.ids)) - len(scheduled)
    message = (
        repairs.replay_message(len(scheduled), rate, previous)
        if previous
        else repairs.NONE_REPLAYED
    )
    ids = sorted(job_id for job_id, _ in scheduled)
    return console.Outcome(
        message, len(scheduled), ids, console.left_alone(skipped, "dead letter", repairs.GONE)
    )
