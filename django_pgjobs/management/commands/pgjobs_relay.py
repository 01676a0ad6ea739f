"""``manage.py pgjobs_relay``: the outbox relay on its own, for relays scaled apart from the
workers (docs/reference/commands.md). A thin shell over ``outbox.relay.OutboxRelay``."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from ...conf import get_config
from ...outbox.publishers import publisher_problem
from ...outbox.relay import relay_from_settings
from ...worker.faults import DispatcherDatabase
from ...worker.stopping import StopState


class Command(BaseCommand):
    help = "Publish the transactional outbox's events to the broker (docs/howto/outbox.md)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--publisher",
            default=None,
            help="Broker URL or dotted path of a publisher (default: PGJOBS['OUTBOX_PUBLISHER']).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once the outbox has nothing ready."
        )

    def handle(self, *args, publisher=None, burst=False, **options) -> None:
        config = get_config()
        publisher = publisher or config.OUTBOX_PUBLISHER
        if not publisher:
            raise CommandError("no publisher: set PGJOBS['OUTBOX_PUBLISHER'] or pass --publisher")
        problem = publisher_problem(publisher)
        if problem is not None:  # the system check pgjobs.E005 reads only the setting
            raise CommandError(
                f"the publisher {_shown(publisher)} (--publisher, or PGJOBS['OUTBOX_PUBLISHER']) "
                f"cannot be used: {problem}"
            )
        stop = StopState(config.SHUTDOWN_GRACE_SECONDS)
        db = DispatcherDatabase(config.DATABASE, stop)
        # runs of at most a second: a stop requested is seen between them
        relay = relay_from_settings(db, publisher, budget_seconds=1.0)
        wake = threading.Event()

        def request_stop(*_: object) -> None:
            stop.request()
            wake.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        self.stdout.write(f"pgjobs_relay: publishing the outbox to {_shown(publisher)}")
        self.stdout.flush()
        try:
            while not stop.requested.is_set():
                counts = db.with_retries(relay.run_once)
                if burst and not (counts.published or counts.retried or counts.dead_lettered):
                    break
                wake.wait(relay.interval() if not counts.published else 0)
        finally:
            relay.close()
            db.close()


def _shown(publisher: str) -> str:
    """The publisher without a password."""
    head, at, tail = publisher.rpartition("@")
    return f"{head.split('://')[0]}://***@{tail}" if at and "://" in head else publisher
