"""The worker's log lines: the start-up line, the periodic summary (``stats_interval``), which
is also the last line a stopping worker writes, and each finished job's at debug level
(``runjobs -v 2``)."""

from __future__ import annotations

import logging
import time

from django.db import connections

from .options import WorkerOptions
from .outcomes import Failed, Stats, Succeeded

logger = logging.getLogger("django_pgjobs.worker")


def log_start(options: WorkerOptions, worker_id: str, async_enabled: bool) -> None:
    settings_dict = connections[options.alias].settings_dict
    logger.info(
        "worker %s started: release=%s queues=%s concurrency=%d async=%s batch=%d prefetch=%s "
        "database=%s (%s@%s:%s/%s) wake=%s",
        worker_id,
        options.release or "-",
        ",".join(options.queues) if options.queues else "all",
        options.concurrency,
        options.async_concurrency if async_enabled else "none",
        options.batch_size,
        "auto" if options.prefetch is None else options.prefetch,
        options.alias,
        settings_dict.get("USER") or "-",
        settings_dict.get("HOST") or "local",
        settings_dict.get("PORT") or "5432",
        settings_dict.get("NAME"),
        f"listen+poll {options.poll_interval:g}s"
        if options.listen
        else f"poll {options.poll_interval:g}s",
    )


def warn_unused_queues(queues: tuple[str, ...] | None, known: set[str]) -> list[str]:
    """Warn about the queues a worker was told to work on that no registered job uses and no
    job, dead letter or pause has named (a typo idles for ever without a word); returns them."""
    unused = [queue for queue in queues or () if queue not in known]
    if unused:
        logger.warning(
            "no registered job uses queue(s) %s and no job has been in them: this worker may "
            "wait for ever; queues in use: %s",
            ", ".join(repr(queue) for queue in unused),
            ", ".join(sorted(known)) or "none",
        )
    return unused


def log_stats(stats: Stats, final: bool = False) -> None:
    """The summary of the window since the last one, which it closes."""
    now = time.monotonic()
    s = stats
    elapsed = max(now - s.window_started, 1e-9)
    logger.info(
        "%s: processed=%d succeeded=%d retried=%d dead_lettered=%d lost=%d released=%d rate=%.1f/s",
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


def log_finished(item: Succeeded | Failed) -> None:
    job = item.job
    logger.debug(
        "job %s #%s %s in %.1f ms (attempt %d/%d)",
        job.name,
        job.id,
        "succeeded" if isinstance(item, Succeeded) else f"failed ({type(item.error).__name__})",
        item.duration * 1000,
        job.attempts,
        job.max_attempts,
    )
