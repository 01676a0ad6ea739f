"""``manage.py runjobs``: a thin shell over ``django_pgjobs.worker.Worker``."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal

from django.core.management.base import BaseCommand, CommandError

from django_pgjobs.db import JobsTableMissing
from django_pgjobs.reloading import ReloadingWorker
from django_pgjobs.validation import check_count, check_positive_seconds, check_seconds
from django_pgjobs.worker import Worker
from django_pgjobs.worker.holding import MAX_HELD, TARGET_SECONDS
from django_pgjobs.worker.options import STATS_INTERVAL_SECONDS

# Typical Django jobs wait on the network or the database (mail, HTTP, queries), and threads
# waiting on I/O release the GIL: 4 slots keep 2 cores busy while each worker stays at a few
# database connections (one per slot that uses the ORM, plus 2 of its own).
DEFAULT_CONCURRENCY = 4


def _parsed(convert, check, name: str):
    """An argparse type: the text converted, then checked by the rule ``WorkerOptions`` uses
    (``validation.py``), so the command line and ``Worker(...)`` refuse the same values."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {name}: {text!r}") from None
        try:
            return check(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = name
    return parse


def _count(option: str, low: int):
    name = "integer >= 0" if low == 0 else "positive integer"
    return _parsed(int, lambda value: check_count(option, value, low), name)


def _seconds(option: str, zero: bool = True):
    name = "number of seconds" if zero else "number of seconds greater than 0"
    check = check_seconds if zero else check_positive_seconds
    return _parsed(float, lambda value: check(option, value), name)


# (flags, type, default, help): the options besides --queue, --burst and --no-listen
OPTIONS = [
    (("--concurrency", "-c"), _count("concurrency", 1), DEFAULT_CONCURRENCY,
     f"Execution slots (threads) of this worker. Default: {DEFAULT_CONCURRENCY}."),
    (("--async-concurrency",), _count("async_concurrency", 1), None,
     "Async def jobs run at once on this worker's event loop "
     "(PGJOBS['ASYNC_CONCURRENCY'] by default: 32)."),
    (("--batch-size",), _count("batch_size", 1), None,
     f"Most jobs claimed by one statement. Default: {MAX_HELD}."),
    (("--prefetch",), _count("prefetch", 0), None,
     "Jobs claimed ahead of free slots. Default: adaptive, about "
     f"{TARGET_SECONDS * 1000:g} ms of expected work per slot from recent job durations; "
     "none while long or unseen jobs are in the mix."),
    (("--max-jobs",), _count("max_jobs", 1), None,
     "Exit after this many jobs have been claimed and finished."),
    (("--poll-interval",), _seconds("poll_interval", zero=False), None,
     "Seconds between polls (PGJOBS['POLL_INTERVAL_SECONDS'] by default)."),
    (("--shutdown-grace",), _seconds("shutdown_grace"), None,
     "Seconds running jobs get to finish after SIGTERM/SIGINT "
     "(PGJOBS['SHUTDOWN_GRACE_SECONDS'] by default)."),
    (("--stats-interval",), _seconds("stats_interval", zero=False), STATS_INTERVAL_SECONDS,
     f"Seconds between summary log lines. Default: {STATS_INTERVAL_SECONDS:g}."),
]  # fmt: skip


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
            "--database",
            metavar="ALIAS",
            help="The database whose queues this worker serves (PGJOBS['DATABASE'] or one of "
            "PGJOBS['QUEUE_DATABASES']). Default: the database of the --queue given, else "
            "PGJOBS['DATABASE'].",
        )
        for flags, kind, default, text in OPTIONS:
            parser.add_argument(*flags, type=kind, default=default, help=text)
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit with status 0 once no job is ready.",
        )
        parser.add_argument(
            "--liveness-file",
            metavar="PATH",
            help="Touch this file at start and every HEARTBEAT_SECONDS while the worker's loop "
            "turns, for a probe that checks its age (docs/howto/deploy.md).",
        )
        parser.add_argument(
            "--no-listen",
            action="store_true",
            help="Poll only, no LISTEN/NOTIFY (for PgBouncer in transaction mode).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Development: restart the worker when the project's code changes (Django's "
            "autoreloader, as runserver), its held jobs handed back first.",
        )

    def handle(self, *args, **options):
        _ensure_logging(options["verbosity"])
        if hasattr(signal, "SIGUSR1"):
            # `kill -USR1 <pid>`: every thread's stack on stderr, for a worker that seems stuck
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        try:
            worker = Worker(
                queues=options["queues"],
                database=options["database"],
                concurrency=options["concurrency"],
                async_concurrency=options["async_concurrency"],
                batch_size=options["batch_size"],
                prefetch=options["prefetch"],
                burst=options["burst"],
                max_jobs=options["max_jobs"],
                poll_interval=options["poll_interval"],
                shutdown_grace=options["shutdown_grace"],
                listen=False if options["no_listen"] else None,  # None: LISTEN_NOTIFY
                stats_interval=options["stats_interval"],
                liveness_file=options["liveness_file"],
                # with --reload it runs off the main thread, where no handler can be installed
                install_signal_handlers=not options["reload"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from error
        if options["reload"]:
            ReloadingWorker(worker).run()
            return
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
