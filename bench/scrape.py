"""Time ``pgjobs/metrics`` and ``pgjobs/health`` on a big queue: 1,000,000 job rows and
100,000 dead letters.

    python bench/scrape.py                  # fill (as bench/admin_pages.py does), time, print
    python bench/scrape.py --reuse          # time again on the rows of the last run
    python bench/scrape.py --jobs 100000    # a smaller run

Uses the database of ``bench/admin_pages.py`` (``pgjobs_admin_bench``, the same bad night of
rows). Each endpoint is requested ``--repeat`` times after one warm-up through
``django.test.Client`` (the whole Django stack minus the network), once with the bearer token
(everything) as a scraper does; the table gives the median and the slowest. Then each statement
of one scrape is run again under ``EXPLAIN (ANALYZE, BUFFERS)``: its time and the indexes its
plan walks, so a statement that reads a table whole shows up. Exits 1 when a median reaches
``--limit`` seconds (0.1).
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.admin_pages import exit_status, parse_options, prepare  # noqa: E402

TOKEN = "bench-scrape-token-0123456789abcdef"
ENDPOINTS = (("metrics", "/pgjobs/metrics"), ("health", "/pgjobs/health"))


def time_endpoints(repeat: int) -> tuple[list[tuple[str, float, float, int]], list[str]]:
    """(label, median, slowest, queries) per endpoint, and the SQL of one metrics scrape."""
    from django.conf import settings
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import override_settings

    client = Client()
    results, scrape_sql = [], []
    token = {**settings.PGJOBS, "METRICS_TOKEN": TOKEN}
    with override_settings(DEBUG=True, PGJOBS=token):  # DEBUG: to count queries
        for label, url in ENDPOINTS:
            durations, queries = [], 0
            for attempt in range(repeat + 1):
                reset_queries()
                started = time.perf_counter()
                response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
                elapsed = time.perf_counter() - started
                assert response.status_code in (200, 503), (url, response.status_code)
                if attempt:  # the first one warms caches up
                    durations.append(elapsed)
                    queries = len(connection.queries)
                    if label == "metrics":
                        scrape_sql = [query["sql"] for query in connection.queries]
            results.append((label, statistics.median(durations), max(durations), queries))
    return results, scrape_sql


def explain(statements: list[str]) -> list[tuple[str, float, str]]:
    """(first words, milliseconds, indexes walked) of each statement, EXPLAIN ANALYZEd."""
    from django.db import connection

    explained = []
    with connection.cursor() as cursor:
        for text in statements:
            if text.lstrip().upper().startswith("EXPLAIN"):  # the planner's estimates: no run
                explained.append((" ".join(text.split()[:8]), 0.0, "(planned only)"))
                continue
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + text)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            took = float(re.search(r"Execution Time: ([\d.]+) ms", plan).group(1))
            indexes = sorted(set(re.findall(r"Index (?:Only )?Scan (?:using|on) (\w+)", plan)))
            seq = sorted(set(re.findall(r"Seq Scan on (\w+)", plan)))
            walked = ", ".join(indexes) + (f"; seq scan: {', '.join(seq)}" if seq else "")
            explained.append((" ".join(text.split()[:8]), took, walked))
    return explained


def main(argv: list[str]) -> int:
    options = parse_options(argv, __doc__.splitlines()[0], repeat=20, limit=0.1)
    job_rows, dead_rows, version = prepare(options)
    logging.getLogger("django.request").setLevel(logging.ERROR)  # health's 503s are expected
    results, scrape_sql = time_endpoints(options.repeat)
    print(
        f"\n{job_rows:,} job rows, {dead_rows:,} dead letters, PostgreSQL {version}, "
        f"{os.cpu_count()} CPUs, median of {options.repeat} requests\n"
    )
    print("| endpoint | median (ms) | slowest (ms) | queries |")
    print("| --- | ---: | ---: | ---: |")
    for label, median, slowest, queries in results:
        print(f"| {label} | {median * 1000:.1f} | {slowest * 1000:.1f} | {queries} |")
    print("\n| statement of one scrape | ms | indexes walked |")
    print("| --- | ---: | --- |")
    for words, took, walked in explain(scrape_sql):
        print(f"| `{words} ...` | {took:.2f} | {walked} |")
    return exit_status(results, options.limit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
