"""Each kind of job is claimed for its own slots: sync jobs never fill the async slots, so
``--prefetch`` holds for sync jobs in a project that also has ``async def`` jobs (the demo
project registers some), and a worker claims only what it can start."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter as Tally

import pytest
from helpers import wait_until

from django_pgjobs.models import Job
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def started(worker) -> bool:
    return "started" in worker.output()


def test_two_workers_without_prefetch_share_sync_jobs_when_async_jobs_are_registered(
    start_worker,
):
    """Two ``-c 1 --prefetch 0`` workers, six 1.2 s jobs: three each, not six for the first."""
    workers = [start_worker("--concurrency", "1", "--prefetch", "0") for _ in range(2)]
    wait_until(lambda: all(started(w) for w in workers), timeout=60)
    assert all("async=32" in w.output() for w in workers)  # async jobs are registered
    time.sleep(0.5)  # listening
    demo.record.enqueue_many([((f"slow-{i}",), {"sleep": 1.2}) for i in range(6)])
    wait_until(lambda: Execution.objects.count() == 6, timeout=60)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output()
    by_worker = Tally(Execution.objects.values_list("pid", flat=True))
    assert by_worker == {workers[0].pid: 3, workers[1].pid: 3}, by_worker


def test_a_worker_claims_no_more_than_its_slots_can_start(start_worker):
    """``-c 2`` with the adaptive prefetch and jobs too long to hold: every claim is for free
    executors only, so nothing claimed is handed back (it was most of every claim)."""
    demo.record.enqueue_many([((f"long-{i}",), {"sleep": 0.15}) for i in range(16)])
    worker = start_worker("--concurrency", "2")
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    released = int(re.search(r"stopped: .* released=(\d+)", worker.output())[1])
    assert released == 0, worker.output()
    assert Execution.objects.count() == 16
