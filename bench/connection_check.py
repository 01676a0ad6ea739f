"""Cost of the per-job connection check of an execution slot, alone, in microseconds per job.

``python -m bench.connection_check`` from the repository root (a throwaway PostgreSQL is
started as for the tests). Measures ``before_job`` + ``after_job`` of one slot with no
connection open (a job that touches no database: the no-op drain) and with one idle connection
kept open (``CONN_MAX_AGE = None``). Best of 5 loops.
"""

from __future__ import annotations

import os
import time

import django


def per_job_microseconds(slot, jobs: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(jobs):
            slot.before_job(None)
            slot.after_job()
        best = min(best, (time.perf_counter() - started) / jobs)
    return best * 1e6


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    from django.db import connections

    from django_pgjobs.worker import ExecutorConnections

    connections["default"].settings_dict["CONN_MAX_AGE"] = None
    slot = ExecutorConnections()
    print(f"no connection open: {per_job_microseconds(slot, 200_000):.2f} us per job")
    connections["default"].ensure_connection()
    print(f"one idle connection open: {per_job_microseconds(slot, 50_000):.2f} us per job")


if __name__ == "__main__":
    main()
