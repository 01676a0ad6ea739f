"""docs/howto/from-celery.md, "Periodic tasks": what Celery beat scheduled, enqueued from cron."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils import timezone

from testproject.handlers.from_celery import send_daily_digest


class Command(BaseCommand):
    help = "Enqueue today's digest (run it from cron, as Celery beat ran the task)."

    def handle(self, *args, **options):
        today = timezone.localdate().isoformat()
        # unique_key: a second run while today's digest still waits adds no second job
        queued = send_daily_digest.using(unique_key=f"digest:{today}").delay(today)
        self.stdout.write(f"digest for {today}: job #{queued.pk}")
