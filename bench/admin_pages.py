"""Time every admin page on a big queue: 1,000,000 job rows and 100,000 dead letters.

    python bench/admin_pages.py                 # fill, time, print a Markdown table
    python bench/admin_pages.py --jobs 100000   # a smaller run
    python bench/admin_pages.py --reuse         # time again without refilling

The rows go into their own database, ``pgjobs_admin_bench``, on the server of ``DATABASE_URL``
(or on a private throwaway server when it is unset), filled with ``INSERT ... SELECT
generate_series`` in seconds. The job rows are a bad night: a backlog of due jobs, scheduled
and retrying jobs with their errors and tracebacks, running jobs (some with expired leases) and
successful jobs kept by retention, over 5 queues and 12 job names; dead letters spread over
10 days with 3 errors each. Each page is requested ``--repeat`` times by a logged-in superuser
(``django.test.Client``, the whole Django stack minus the network) after one warm-up; the table
gives the median and the slowest. Exits 1 when a median reaches ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB = "pgjobs_admin_bench"
QUEUES = ["default", "emails", "payments", "reports", "webhooks"]
NAMES = [f"shop.jobs.task_{i:02d}" for i in range(10)] + [
    "testproject.demo.jobs.record",
    "testproject.demo.jobs.flaky",
]
TRACEBACK = (
    "Traceback (most recent call last):\\n"
    '  File "/srv/app/django_pgjobs/worker.py", line 318, in _execute\\n'
    "    definition.func(*job.args, **job.kwargs)\\n"
    '  File "/srv/app/shop/jobs.py", line 42, in task\\n'
    "    response = client.post(url, json=payload, timeout=10)\\n"
    '  File "/srv/app/.venv/lib/python3.12/site-packages/httpx/_client.py", line 1145, in post\\n'
    "    raise ConnectError(message)\\n"
)


def point_at_bench_database() -> None:
    """Create the bench database and make Django use it (before settings are imported)."""
    import psycopg

    from testproject import throwaway_pg

    server = urlsplit(throwaway_pg.database_url())
    with psycopg.connect(urlunsplit(server._replace(path="/postgres")), autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,)
        ).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
    os.environ["DATABASE_URL"] = urlunsplit(server._replace(path=f"/{BENCH_DB}"))


def sql_array(values: list[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{v}'" for v in values) + "]"


def fill(jobs: int, dead: int) -> None:
    from django.db import connection

    queues, names = sql_array(QUEUES), sql_array(NAMES)
    pick_queue = f"({queues})[1 + (i % {len(QUEUES)})]"
    pick_name = f"({names})[1 + ((i / 7) % {len(NAMES)})]"
    error = (
        "jsonb_build_object('at', now() - (n || ' minutes')::interval, 'attempt', n, "
        "'type', (ARRAY['ConnectionError','TimeoutError','ValueError','KeyError',"
        "'PermissionError','LeaseExpired'])[1 + (i % 6)], "
        "'message', 'upstream said no to request ' || i || ' (attempt ' || n || ')', "
        f"'traceback', E'{TRACEBACK}' || 'ConnectError: ' || i, 'worker', 'web-1:42:abc')"
    )
    # S608: every piece of SQL below is a constant of this script; nothing comes from input.
    errors = f"(SELECT jsonb_agg({error}) FROM generate_series(1, ATTEMPTS) AS n)"  # noqa: S608
    shares = {"due": 0.60, "scheduled": 0.10, "retrying": 0.05, "running": 0.01}
    counts = {k: int(jobs * v) for k, v in shares.items()}
    counts["successful"] = jobs - sum(counts.values())
    columns = (
        "name, queue, priority, args, kwargs, status, run_after, attempts, max_attempts, "
        "unique_key, created_at, started_at, finished_at, lease_expires_at, worker, errors"
    )
    statements = {
        "due": f"""SELECT {pick_name}, {pick_queue}, (i % 3) * 10 - 10, jsonb_build_array(i, 'order-' || i),
              jsonb_build_object('password', 'hunter2', 'retries', i % 5), 'ready',
              now() - (i % 7200) * interval '1 second', 0, 5, CASE WHEN i % 10 = 0 THEN 'key-' || i END,
              now() - (i % 7200 + 5) * interval '1 second', NULL, NULL, NULL, '', '[]'::jsonb""",
        "scheduled": f"""SELECT {pick_name}, {pick_queue}, 0, jsonb_build_array(i), '{{}}'::jsonb, 'ready',
              now() + (1 + i % 86400) * interval '1 second', 0, 5, NULL, now(), NULL, NULL, NULL, '', '[]'::jsonb""",
        "retrying": f"""SELECT {pick_name}, {pick_queue}, 0, jsonb_build_array(i), '{{}}'::jsonb, 'ready',
              now() + (i % 600 - 60) * interval '1 second', 1 + i % 3, 5, NULL, now() - interval '1 hour',
              now() - interval '5 minutes', NULL, NULL, '', {errors.replace("ATTEMPTS", "1 + i % 3")}""",
        "running": f"""SELECT {pick_name}, {pick_queue}, 0, jsonb_build_array(i), '{{}}'::jsonb, 'running',
              now() - interval '2 minutes', 1, 5, NULL, now() - interval '3 minutes', now() - interval '1 minute',
              NULL, now() + (CASE WHEN i % 10 = 0 THEN -120 ELSE 50 END) * interval '1 second',
              'web-' || (i % 20) || ':4242:abcdef', '[]'::jsonb""",
        "successful": f"""SELECT {pick_name}, {pick_queue}, 0, jsonb_build_array(i), '{{}}'::jsonb, 'successful',
              now() - interval '1 hour', 1, 5, NULL, now() - interval '2 hours', now() - interval '1 hour',
              now() - (i % 86400) * interval '1 second', NULL, '', '[]'::jsonb""",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pgjobs_job, pgjobs_deadletter, pgjobs_stat, pgjobs_worker, pgjobs_queue"
        )
        for view, sql in statements.items():
            started = time.monotonic()
            cursor.execute(
                f"INSERT INTO pgjobs_job ({columns}) {sql} FROM generate_series(1, {counts[view]}) AS i"
            )
            print(f"  {counts[view]:>9,} {view} jobs in {time.monotonic() - started:.1f}s")
        started = time.monotonic()
        cursor.execute(
            f"""INSERT INTO pgjobs_deadletter (job_id, name, queue, priority, args, kwargs, attempts,
                    max_attempts, unique_key, reason, error_type, errors, created_at, started_at, failed_at)
                SELECT 5000000 + i, {pick_name}, {pick_queue}, 0, jsonb_build_array(i), '{{}}'::jsonb, 3, 3,
                    NULL, 'attempts exhausted (3/3): ' || e.type || ': upstream said no',
                    e.type, {errors.replace("ATTEMPTS", "3")},
                    now() - (i % 864000 + 600) * interval '1 second', now() - (i % 864000) * interval '1 second',
                    now() - (i % 864000) * interval '1 second'
                FROM generate_series(1, {dead}) AS i,
                     LATERAL (SELECT (ARRAY['ConnectionError','TimeoutError','ValueError','KeyError',
                              'PermissionError','LeaseExpired'])[1 + (i % 6)] AS type) AS e"""  # noqa: S608
        )
        print(f"  {dead:>9,} dead letters in {time.monotonic() - started:.1f}s")
        cursor.execute(
            f"""INSERT INTO pgjobs_stat (queue, minute, succeeded, retried, dead_lettered, wait_buckets)
                SELECT q, date_trunc('minute', now()) - m * interval '1 minute', 50 + m % 30, m % 4, m % 2,
                       ARRAY[5, 10, 20, 30, 20, 10, 5, 3, 2, 1, 1, 0, 0, 0, 0]
                FROM unnest({queues}) AS q, generate_series(0, 2879) AS m"""  # noqa: S608
        )
        cursor.execute(
            """INSERT INTO pgjobs_worker (id, hostname, pid, queues, concurrency, started_at, last_seen_at)
               SELECT 'web-' || i || ':4242:abcdef', 'web-' || i, 4242, '[]', 8, now() - interval '1 hour',
                      now() - (i % 3) * interval '10 seconds' FROM generate_series(0, 19) AS i"""
        )
        cursor.execute(
            "INSERT INTO pgjobs_queue (name, paused, changed_at) VALUES ('reports', true, now())"
        )
    started = time.monotonic()
    connection.ensure_connection()
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgjobs_job")
        cursor.execute("VACUUM ANALYZE pgjobs_deadletter")
        cursor.execute("VACUUM ANALYZE pgjobs_stat")
    print(f"  vacuum analyze in {time.monotonic() - started:.1f}s")


def pages(deep_page: int) -> list[tuple[str, str]]:
    from django.urls import reverse

    from django_pgjobs.models import DeadLetter, Job

    jobs = reverse("admin:django_pgjobs_job_changelist")
    dead = reverse("admin:django_pgjobs_deadletter_changelist")
    retrying = Job.objects.filter(status="ready", attempts=3).order_by("id").first()
    some_id = Job.objects.order_by("-id").values_list("id", flat=True)[500]
    dead_one = DeadLetter.objects.order_by("-id").first()
    return [
        ("admin index", reverse("admin:index")),
        ("app index", reverse("admin:app_list", args=["django_pgjobs"])),
        ("dashboard", reverse("admin:django_pgjobs_job_dashboard")),
        ("jobs: all (newest first)", jobs),
        (f"jobs: page {deep_page}", jobs + f"?p={deep_page}"),
        ("jobs: due", jobs + "?view=due"),
        ("jobs: scheduled", jobs + "?view=scheduled"),
        ("jobs: retrying", jobs + "?view=retrying"),
        ("jobs: running", jobs + "?view=running"),
        ("jobs: lease expired", jobs + "?view=lease_expired"),
        ("jobs: successful", jobs + "?view=successful"),
        ("jobs: queue", jobs + "?queue=payments"),
        ("jobs: queue + retrying", jobs + "?queue=payments&view=retrying"),
        ("jobs: job name", jobs + "?name=shop.jobs.task_03"),
        ("jobs: name + scheduled", jobs + "?name=shop.jobs.task_03&view=scheduled"),
        ("jobs: search id", jobs + f"?q={some_id}"),
        ("jobs: search name", jobs + "?q=task_07"),
        ("jobs: search unique key", jobs + "?q=key-5000"),
        ("job detail (3 errors)", reverse("admin:django_pgjobs_job_change", args=[retrying.pk])),
        ("dead letters: all", dead),
        (f"dead letters: page {deep_page}", dead + f"?p={deep_page}"),
        ("dead letters: last hour", dead + "?within=1h"),
        ("dead letters: error type", dead + "?error_type=TimeoutError"),
        ("dead letters: job name", dead + "?name=shop.jobs.task_05"),
        ("dead letters: queue", dead + "?queue=emails"),
        (
            "dead letters: type + name + 24h",
            dead + "?error_type=KeyError&name=shop.jobs.task_02&within=24h",
        ),
        ("dead letters: search", dead + "?q=TimeoutError"),
        (
            "dead letter detail",
            reverse("admin:django_pgjobs_deadletter_change", args=[dead_one.pk]),
        ),
        ("dead letters by error", reverse("admin:django_pgjobs_deadletter_summary")),
        ("workers", reverse("admin:django_pgjobs_worker_changelist")),
        ("queues", reverse("admin:django_pgjobs_queuestate_changelist")),
    ]


def time_pages(repeat: int, deep_page: int) -> list[tuple[str, float, float, int]]:
    from django.contrib.auth.models import User
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import override_settings

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)
    results = []
    with override_settings(DEBUG=True):  # to count queries
        for label, url in pages(deep_page):
            durations = []
            queries = 0
            for attempt in range(repeat + 1):
                reset_queries()
                started = time.perf_counter()
                response = client.get(url)
                elapsed = time.perf_counter() - started
                assert response.status_code == 200, (url, response.status_code)
                if attempt:  # the first one warms caches up
                    durations.append(elapsed)
                    queries = len(connection.queries)
            results.append((label, statistics.median(durations), max(durations), queries))
            print(f"  {label:<34} {statistics.median(durations) * 1000:8.1f} ms", flush=True)
    return results


def parse_options(argv: list[str], description: str, repeat: int, limit: float):
    """The options of a timing run on the big queue (this script's and bench/scrape.py's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument(
        "--limit", type=float, default=limit, help="seconds a median must stay under"
    )
    parser.add_argument("--reuse", action="store_true", help="keep the rows of the last run")
    return parser.parse_args(argv)


def prepare(options) -> tuple[int, int, str]:
    """Point Django at the bench database, migrate, fill it (unless ``--reuse``); returns the
    job rows, the dead letters and the server's version."""
    point_at_bench_database()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if not options.reuse:
        print(f"filling {options.jobs:,} job rows and {options.dead:,} dead letters")
        fill(options.jobs, options.dead)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM pgjobs_job), (SELECT count(*) FROM pgjobs_deadletter), "
            "current_setting('server_version')"
        )
        return cursor.fetchone()


def exit_status(results, limit: float) -> int:
    """1 (naming them) when some medians of ``results`` reached ``limit`` seconds, else 0."""
    slow = [label for label, median, _, _ in results if median >= limit]
    if slow:
        print(f"\nslower than {limit:g}s: {', '.join(slow)}")
        return 1
    return 0


def main(argv: list[str]) -> int:
    options = parse_options(argv, __doc__.splitlines()[0], repeat=5, limit=1.0)
    job_rows, dead_rows, version = prepare(options)
    print(f"timing pages ({options.repeat} requests each after a warm-up)")
    # deep in the list, within the 10,000 rows a list counts (page size 50)
    deep_page = max(1, min(150, dead_rows // 100))
    results = time_pages(options.repeat, deep_page)
    print()
    print(
        f"{job_rows:,} job rows, {dead_rows:,} dead letters, PostgreSQL {version}, "
        f"{os.cpu_count()} CPUs, median of {options.repeat} requests"
    )
    print()
    print("| page | median (ms) | slowest (ms) | queries |")
    print("| --- | ---: | ---: | ---: |")
    for label, median, slowest, queries in results:
        print(f"| {label} | {median * 1000:.0f} | {slowest * 1000:.0f} | {queries} |")
    return exit_status(results, options.limit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
