"""A producer process of tests/test_unique.py: ``python tests/unique_producer.py JOB N`` sets
Django up on ``DATABASE_URL``, says "ready", waits for a line on stdin (every producer of a test
starts at once), enqueues N times on its own connection and prints the outcomes as JSON.

JOB ``reindex``: the debounced ``reindex_document(42, title="<pid>:<i>")``, due in an hour (no
worker takes it); ``sync``: the throttled ``sync_account(7)``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from testproject.handlers.unique import reindex_document, sync_account  # noqa: E402


def main(kind: str, calls: int) -> None:
    print("ready", flush=True)
    sys.stdin.readline()
    outcomes = []
    for i in range(calls):
        if kind == "reindex":
            job = reindex_document.using(delay=3600).enqueue(42, title=f"{os.getpid()}:{i}")
        else:
            job = sync_account.enqueue(7)
        outcomes.append(job.enqueue_outcome.value)
    print(json.dumps({"pid": os.getpid(), "outcomes": outcomes}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
