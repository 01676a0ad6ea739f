"""``manage.py runjobs``: a thin shell over ``django_pgjobs.worker.Worker``."""

from __future__ import annotations

import logging

from django.core.management.base import BaseCommand, CommandError

from django_pgjobs.conf import get_config
from django_pgjobs.db import JobsTableMissing
from django_pgjobs.worker import Worker


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
            default=1,
            help="Execution slots (threads) of this worker. Default: 1.",
        )
        parser.add_argument(
            "--batch-size",
            type=_positive_int,
            default=10,
            help="Most jobs claimed by one statement. Default: 10.",
        )
        parser.add_argument(
            "--prefetch",
            type=_non_negative_int,
            default=0,
            help="Jobs claimed ahead of free slots (faster draining of short jobs, less "
            "fairness across workers). Default: 0.",
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
        try:
            worker = Worker(
                queues=options["queues"],
                concurrency=options["concurrency"],
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
