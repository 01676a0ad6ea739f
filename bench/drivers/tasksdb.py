"""django-tasks-db driver (its db_worker command; one task at a time per process)."""

from __future__ import annotations

import os
import sys

from bench.drivers import common


def main(argv: list[str]) -> None:
    command, *rest = argv
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.tasksdb_settings"}
    if command == "worker":
        interval = "1"
        while rest:
            flag = rest.pop(0)
            if flag in ("--interval", "--poll"):
                interval = rest.pop(0)
        os.execve(
            sys.executable,
            [
                sys.executable,
                "-m",
                "django",
                "db_worker",
                "--interval",
                interval,
                "--no-startup-delay",
                "--queue-name",
                "*",
            ],
            env,
        )
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from bench import tasksdb_tasks as tasks

    if command == "setup":
        call_command("migrate", verbosity=0)
    elif command == "enqueue":
        common.timed_loop(int(rest[0]), tasks.noop.enqueue)
    elif command in ("bulk", "bulk-sleep"):
        # No bulk API: every enqueue in one transaction is the closest.
        n = int(rest[0])

        def enqueue_all():
            with transaction.atomic():
                for i in range(n):
                    if command == "bulk":
                        tasks.noop.enqueue()
                    else:
                        tasks.nap.enqueue(common.sleep_seconds(i))

        common.timed_bulk(enqueue_all)
    elif command == "latency":
        common.latency_loop(int(rest[0]), float(rest[1]), lambda sent: tasks.timed.enqueue(sent))
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
