"""``manage.py runjobs``: a thin shell over ``django_pgjobs.worker.Worker``."""

from __future__ import annotations

import faulthandler
import logging
import signal

from django.core.management.base import BaseCommand, CommandError

from django_pgjobs.conf import get_config
from django_pgjobs.db import JobsTableMissing
from django_pgjobs.worker import Worker
from django_pgjobs.worker.holding import MAX_HELD, TARGET_SECONDS

# Typical Django jobs wait on the network or the database (mail, HTTP, queries), and threads
# waiting on I/O release the GIL: 4 slots keep 2 cores busy while each worker stays at a few
# database connections (one per slot that uses the ORM, plus 2 of its own).
DEFAULT_CONCURRENCY = 4


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise ValueError
    return number


def _positive_seconds(value: str) -> float:
    number = _seconds(value)
    if number == 0:
        raise ValueError
    return number


_positive_int.__name__ = "positive integer"
_non_negative_int.__name__ = "integer >= 0"
_seconds.__name__ = "number of seconds"
_positive_seconds.__name__ = "number of seconds greater than 0"


class Command(BaseCommand):
    help = "Run a django-pgjobs worker: claim jobs from PostgreSQL and run them."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Queue to work on; repeat for several. Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=_positive_int,
            default=DEFAULT_CONCURRENCY,
            help=f"Execution slots (threads) of this worker. Default: {DEFAULT_CONCURRENCY}.",
        )
        parser.add_argument(
            "--async-concurrency",
            type=_positive_int,
            default=None,
            help="Async def jobs run at once on this worker's event loop "
            "(PGJOBS['ASYNC_CONCURRENCY'] by default: 32).",
        )
        parser.add_argument(
            "--batch-size",
            type=_positive_int,
            default=None,
            help=f"Most jobs claimed by one statement. Default: {MAX_HELD}.",
        )
        parser.add_argument(
            "--prefetch",
            type=_non_negative_int,
            default=None,
            help="Jobs claimed ahead of free slots. Default: adaptive, about "
            f"{TARGET_SECONDS * 1000:g} ms of expected work per slot from recent job durations; "
            "none while long or unseen jobs are in the mix.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit with status 0 once no job is ready.",
        )
        parser.add_argument(
            "--max-jobs",
            type=_positive_int,
            default=None,
            help="Exit after this many jobs have been claimed and finished.",
        )
        parser.add_argument(
            "--poll-interval",
            type=_positive_seconds,
            default=None,
            help="Seconds between polls (PGJOBS['POLL_INTERVAL_SECONDS'] by default).",
        )
        parser.add_argument(
            "--shutdown-grace",
            type=_seconds,
            default=None,
            help="Seconds running jobs get to finish after SIGTERM/SIGINT "
            "(PGJOBS['SHUTDOWN_GRACE_SECONDS'] by default).",
        )
        parser.add_argument(
            "--no-listen",
            action="store_true",
            help="Poll only, no LISTEN/NOTIFY (for PgBouncer in transaction mode).",
        )
        parser.add_argument(
            "--stats-interval",
            type=_positive_seconds,
            default=60.0,
            help="Seconds between summary log lines. Default: 60.",
        )

    def handle(self, *args, **options):
        _ensure_logging(options["verbosity"])
        if hasattr(signal, "SIGUSR1"):
            # `kill -USR1 <pid>`: every thread's stack on stderr, for a worker that seems stuck
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        try:
            worker = Worker(
                queues=options["queues"],
                concurrency=options["concurrency"],
                async_concurrency=options["async_concurrency"],
                batch_size=options["batch_size"],
                prefetch=options["prefetch"],
                burst=options["burst"],
                max_jobs=options["max_jobs"],
                poll_interval=options["poll_interval"],
                shutdown_grace=options["shutdown_grace"],
                listen=False if options["no_listen"] else get_config().LISTEN_NOTIFY,
                stats_interval=options["stats_interval"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from error
        try:
            code = worker.run()
        except JobsTableMissing as error:
            raise CommandError(str(error)) from error
        if code:
            raise CommandError(f"worker stopped with status {code}", returncode=code)


def _ensure_logging(verbosity: int) -> None:
    """Make the worker's log lines visible when the project configured no handler for them."""
    logger = logging.getLogger("django_pgjobs")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    if verbosity >= 2:
        logger.setLevel(logging.DEBUG)
    elif logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
