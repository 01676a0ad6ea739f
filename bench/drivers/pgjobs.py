"""django-pgjobs driver."""

from __future__ import annotations

import os
import sys

from bench.drivers import common


def _django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.pgjobs_settings")
    import django

    django.setup()


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "worker":
        # the real command, as a user runs it: only the options given (none: its defaults)
        names = {
            "--concurrency": "--concurrency",
            "--batch": "--batch-size",
            "--prefetch": "--prefetch",
            "--async-concurrency": "--async-concurrency",
        }
        args = list(rest)
        options = []
        while args:
            flag = args.pop(0)
            if flag == "--poll":
                options += ["--no-listen", "--poll-interval", args.pop(0)]
            else:
                options += [names[flag], args.pop(0)]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.pgjobs_settings"}
        os.execve(sys.executable, [sys.executable, "-m", "django", "runjobs", *options], env)
    _django()
    from django.core.management import call_command

    from bench import pgjobs_jobs as jobs

    if command == "setup":
        call_command("migrate", verbosity=0)
    elif command == "enqueue":
        common.timed_loop(int(rest[0]), jobs.noop.enqueue)
    elif command == "enqueue-atomic":
        # the README's pattern: each job enqueued inside its own transaction.atomic() block
        from django.db import transaction

        def enqueue_in_transaction() -> None:
            with transaction.atomic():
                jobs.noop.enqueue()

        common.timed_loop(int(rest[0]), enqueue_in_transaction)
    elif command == "bulk":
        n = int(rest[0])
        common.timed_bulk(lambda: jobs.noop.enqueue_many([() for _ in range(n)]))
    elif command == "bulk-sleep":
        n = int(rest[0])
        common.timed_bulk(
            lambda: jobs.nap.enqueue_many([(common.sleep_seconds(i),) for i in range(n)])
        )
    elif command == "bulk-sleep-async":
        n = int(rest[0])
        common.timed_bulk(
            lambda: jobs.async_nap.enqueue_many([(common.sleep_seconds(i),) for i in range(n)])
        )
    elif command == "soak":  # bench/soak.py: RATE SECONDS PROBE_GAP
        common.paced_load(
            int(rest[0]),
            float(rest[1]),
            float(rest[2]),
            lambda n: jobs.noop.enqueue_many([() for _ in range(n)]),
            jobs.probe.enqueue,
        )
    elif command == "latency":
        common.latency_loop(int(rest[0]), float(rest[1]), jobs.timed.enqueue)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
