"""``manage.py pgjobs``: the admin's numbers and actions from a shell, a thin shell over
``django_pgjobs.console`` (docs/reference/commands.md)."""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from django_pgjobs import console, limits, pruning, repair, replays
from django_pgjobs.admin import display
from django_pgjobs.admin.base import BULK_LIMIT, row_id
from django_pgjobs.conf import queue_database
from django_pgjobs.db import JobsTableMissing

STATUS_COLUMNS = (  # (heading, value of a queue's status)
    ("queue", lambda q: q["queue"] + (" (paused)" if q["paused"] else "")),
    ("due", lambda q: _count(q["due"], q["estimated"])),
    ("scheduled", lambda q: _count(q["scheduled"], q["estimated"])),
    ("retrying", lambda q: _count(q["retrying"], capped=q["retrying_capped"])),
    ("running", lambda q: _count(q["running"])),
    ("expired", lambda q: _count(q["lease_expired"])),
    ("dead", lambda q: _count(q["dead_letters"], capped=q["dead_letters_capped"])),
    ("dead 1h", lambda q: _count(q["dead_letters_last_hour"])),
    ("oldest due", lambda q: display.duration(q["oldest_due_seconds"])),
    ("p95 wait", lambda q: _wait(q, "wait_p95_seconds")),
    ("p99 wait", lambda q: _wait(q, "wait_p99_seconds")),
    ("per min", lambda q: f"{q['throughput_per_minute']:,.1f}"),
    ("failed 1h", lambda q: _rate(q["failure_rate"])),
)
JOB_COLUMNS = ("id", "name", "queue", "state", "attempts", "run_after", "last_error")
DEAD_LETTER_COLUMNS = ("id", "job_id", "name", "queue", "error_type", "attempts", "failed_at")


def _count(value: int, estimated: bool = False, capped: bool = False) -> str:
    return ("≈" if estimated else "") + f"{value:,}" + ("+" if capped else "")


def _wait(queue: dict, key: str) -> str:
    if not queue["wait_samples"]:
        return "–"
    return display.duration(float("inf") if queue["wait_over_last_bucket"] else queue[key])


def _rate(rate: float | None) -> str:
    return "–" if rate is None else f"{rate * 100:.1f} %"


def printable(cell: object) -> str:
    """A cell as a terminal shows it harmlessly: control characters (an escape sequence in an
    error message or a hand-made queue name would move the cursor, clear the screen or retitle
    the window) written as Python escapes, ``\\x1b``."""
    text = str(cell)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def table(headings: list[str], rows: list[list[str]]) -> str:
    """Plain columns, left-aligned, for a terminal (``printable`` cells)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [
        max(len(str(cell)) for cell in column) for column in zip(headings, *rows, strict=True)
    ]
    lines = [headings, *rows]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _id(text: str) -> int:
    number = row_id(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"not an id: {text!r} (a number such as 123 or #123)")
    return number


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= BULK_LIMIT:
        raise argparse.ArgumentTypeError(f"--limit takes 1 to {BULK_LIMIT:,}, not {text!r}")
    return int(text)


#: Units of a duration (``90s``, ``15m``, ``2h``, ``7d``; a bare number is seconds).
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``15m``, ``2h``, ``7d`` (the admin's "died within" 1h, 24h,
    7d, and any other), more than 0."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * DURATION_UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= limits.MAX_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a number of seconds, or with a unit: 90s, 15m, 2h, 7d)"
        )
    return seconds


def _replay_rate(text: str) -> repair.Rate:
    try:
        return repair.parse_rate(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _how_many(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (0 or more)")
    return int(text)


def _filters(parser, *, ids: bool = True, state=None, dead_letters: bool = False) -> None:
    if ids:
        parser.add_argument("ids", nargs="*", type=_id, metavar="ID", help="Row ids.")
    parser.add_argument("--queue", help="Only this queue.")
    parser.add_argument("--name", help="Only jobs of this name (the full dotted name).")
    if state:
        parser.add_argument("--state", choices=state, help="Only jobs in this state.")
    if dead_letters:  # the admin's filters of the dead letters
        parser.add_argument("--error-type", help="Only dead letters of this error type.")
        parser.add_argument(
            "--died-within",
            type=_duration,
            metavar="DURATION",
            help="Only dead letters that died within this time (1h, 24h, 7d...).",
        )
        parser.add_argument(
            "--older-than",
            type=_duration,
            metavar="DURATION",
            help="Only dead letters that died longer ago than this (1h, 24h, 7d...).",
        )


class Command(BaseCommand):
    help = "Operate django-pgjobs from a shell: status, list, requeue, delete, pause, purge..."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = sub.add_parser("status", help="The dashboard's numbers per queue.")
        status.add_argument("--json", action="store_true", help="As JSON.")
        listing = sub.add_parser("list", help="Jobs (or dead letters) matching filters.")
        _filters(listing, ids=False, state=console.JOB_STATES, dead_letters=True)
        listing.add_argument("--dead-letters", action="store_true", help="List dead letters.")
        listing.add_argument("--limit", type=_limit, default=50, help="At most N rows (50).")
        listing.add_argument("--json", action="store_true", help="As JSON.")
        for name, text in (("requeue", "Requeue"), ("delete", "Delete for good")):
            action = sub.add_parser(name, help=f"{text} dead letters by id or filter.")
            _filters(action, dead_letters=True)
            action.add_argument("--dry-run", action="store_true", help="Count, change nothing.")
        sub.choices["requeue"].add_argument(
            "--rate",
            type=_replay_rate,
            help="Spread the jobs over time: 50 (a second), 50/s, 300/m or 1000/h; the first "
            "due now (the admin's Replay over time).",
        )
        for name, text in (("pause", "Pause"), ("resume", "Resume")):
            sub.add_parser(name, help=f"{text} a queue.").add_argument("queue")
        purge = sub.add_parser("purge", help="Cancel (delete) waiting jobs by filter.")
        _filters(purge, state=console.WAITING_STATES)
        purge.add_argument("--dry-run", action="store_true", help="Count, change nothing.")
        prune = sub.add_parser(
            "prune",
            help="Delete successful jobs, finished workflows and dead letters past their retention.",
        )
        prune.add_argument(
            "--dead-letters-older-than",
            type=_duration,
            metavar="DURATION",
            help="Dead letters that died longer ago than this (30d...): instead of "
            "DEAD_LETTER_MAX_AGE_SECONDS.",
        )
        prune.add_argument(
            "--keep-per-name",
            type=_how_many,
            metavar="N",
            help="Dead letters kept per job name, the newest: instead of DEAD_LETTER_MAX_PER_NAME.",
        )
        prune.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")
        for action in sub.choices.values():
            action.add_argument(
                "--database",
                metavar="ALIAS",
                help="The jobs database to act on, with queues on several "
                "(PGJOBS['QUEUE_DATABASES']). Default: the database of the queue named (pause, "
                "resume, --queue), else PGJOBS['DATABASE'] (status: every one).",
            )

    def handle(self, *args, **options):
        alias = options["database"]
        if alias is None and options.get("queue"):  # pause, resume, a --queue filter
            alias = queue_database(options["queue"])
        try:
            with console.on_database(alias):
                getattr(self, "do_" + options["action"])(options)
        except console.BadInput as error:
            raise CommandError(str(error)) from error
        except JobsTableMissing as error:
            raise CommandError(str(error)) from error

    def do_status(self, options):
        data = console.status()
        if options["json"]:
            self.stdout.write(console.as_json(data))
            return
        columns = list(STATUS_COLUMNS)
        if len({q["database"] for q in data["queues"]}) > 1 or options["database"]:
            columns.insert(0, ("database", lambda q: q["database"]))
        rows = [[cell(q) for _, cell in columns] for q in data["queues"]]
        self.stdout.write(table([heading for heading, _ in columns], rows))
        alive, known = data["workers_alive"], len(data["workers"])
        self.stdout.write(f"\nworkers alive: {alive} of {known} registered")

    def do_list(self, options):
        selection = _selection(options)
        if options["dead_letters"]:
            rows = console.list_dead_letters(selection, options["limit"])
            columns = DEAD_LETTER_COLUMNS
        else:
            for option in ("error_type", "died_within", "older_than"):
                if options[option] is not None:
                    flag = "--" + option.replace("_", "-")
                    raise CommandError(f"{flag} filters dead letters: add --dead-letters")
            rows = console.list_jobs(selection, options["limit"])
            columns = JOB_COLUMNS
        if options["json"]:
            self.stdout.write(console.as_json(rows))
            return
        for row in rows:
            row["attempts"] = f"{row['attempts']}/{row['max_attempts']}"
            for key in ("run_after", "failed_at"):
                if row.get(key):  # to the second, as stored (UTC with USE_TZ)
                    row[key] = row[key][:19].replace("T", " ")
        self.stdout.write(table(list(columns), [[row[c] or "" for c in columns] for row in rows]))

    def do_requeue(self, options):
        if options["rate"] is not None:
            self.report(replays.replay(_selection(options), options["rate"], options["dry_run"]))
            return
        self.report(console.act_on_dead_letters("requeue", _selection(options), options["dry_run"]))

    def do_delete(self, options):
        self.report(console.act_on_dead_letters("delete", _selection(options), options["dry_run"]))

    def do_pause(self, options):
        self.report(console.pause(options["queue"], True))

    def do_resume(self, options):
        self.report(console.pause(options["queue"], False))

    def do_purge(self, options):
        self.report(console.purge(_selection(options), options["dry_run"]))

    def do_prune(self, options):
        self.report(
            pruning.prune(
                options["dead_letters_older_than"], options["keep_per_name"], options["dry_run"]
            )
        )

    def report(self, outcome: console.Outcome) -> None:
        """The admin's message, the ids touched (the new jobs of a requeue), what was left
        alone."""
        self.stdout.write(outcome.message)
        if outcome.ids:
            shown = ", ".join(f"#{i}" for i in outcome.ids[:20])
            more = f" and {len(outcome.ids) - 20:,} more" if len(outcome.ids) > 20 else ""
            self.stdout.write(f"ids: {shown}{more}")
        if outcome.left_alone:
            self.stdout.write(outcome.left_alone)


def _selection(options) -> console.Selection:
    return console.Selection(
        ids=tuple(dict.fromkeys(options.get("ids") or ())),
        queue=options.get("queue"),
        name=options.get("name"),
        state=options.get("state"),
        error_type=options.get("error_type"),
        died_within=options.get("died_within"),
        older_than=options.get("older_than"),
    )
