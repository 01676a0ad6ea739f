"""The worker's log lines that are not about one job: the start-up line and the periodic
summary (``stats_interval``), which is also the last line a stopping worker writes."""

from __future__ import annotations

import logging
import time

from django.db import connections

logger = logging.getLogger("django_pgjobs.worker")


def log_start(worker) -> None:
    settings_dict = connections[worker.alias].settings_dict
    logger.info(
        "worker %s started: queues=%s concurrency=%d async=%s batch=%d prefetch=%s database=%s "
        "(%s@%s:%s/%s) wake=%s",
        worker.id,
        ",".join(worker.queues) if worker.queues else "all",
        worker.concurrency,
        worker.async_concurrency if worker.slots.enabled else "none",
        worker.batch_size,
        "auto" if worker.adaptive is not None else worker.fixed_prefetch,
        worker.alias,
        settings_dict.get("USER") or "-",
        settings_dict.get("HOST") or "local",
        settings_dict.get("PORT") or "5432",
        settings_dict.get("NAME"),
        f"listen+poll {worker.poll_interval:g}s"
        if worker.listen
        else f"poll {worker.poll_interval:g}s",
    )


def log_stats(worker, final: bool = False) -> None:
    now = time.monotonic()
    s = worker.stats
    elapsed = max(now - s.window_started, 1e-9)
    logger.info(
        "%s: processed=%d succeeded=%d retried=%d dead=%d lost=%d released=%d rate=%.1f/s",
        "stopped" if final else "summary",
        s.finished,
        s.succeeded,
        s.retried,
        s.dead_lettered,
        s.lost,
        s.released,
        s.window_finished / elapsed,
    )
    s.window_started = now
    s.window_finished = 0
