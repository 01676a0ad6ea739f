"""How many jobs a worker holds when ``prefetch`` is not given: adaptive prefetch.

The worker keeps about ``TARGET_SECONDS`` of expected work waiting per executor, judged from an
exponential moving average of each job name's recent durations. A name not yet seen here counts
as long: while one is in the mix, the worker claims only for free slots, and a long job claimed
beyond the free slots is handed back at once (no attempt spent) for another worker to run.
Short jobs are then claimed, and acknowledged, many per statement, at most ``MAX_HELD`` held.
Dispatcher thread only. See ``docs/explanation/worker.md`` ("How much a worker holds").
"""

from __future__ import annotations

import time

TARGET_SECONDS = 0.1  # expected work waiting per executor: short enough to stay fair
MAX_HELD = 200  # most jobs held (running and waiting) and most per claim
SMOOTHING = 0.2  # weight of the newest duration in the moving average
RECENT_SECONDS = 5.0  # a name claimed this recently is part of the mix the next claim sees


class AdaptivePrefetch:
    def __init__(self) -> None:
        self.average: dict[str, float] = {}  # job name -> moving average duration (seconds)
        self.last_claimed: dict[str, float] = {}  # job name -> monotonic time

    def observe(self, name: str, seconds: float) -> None:
        """A job of ``name`` ran for ``seconds``."""
        previous = self.average.get(name)
        self.average[name] = (
            seconds if previous is None else previous + SMOOTHING * (seconds - previous)
        )

    def claimed(self, name: str) -> None:
        self.last_claimed[name] = time.monotonic()

    def is_long(self, name: str) -> bool:
        """Unknown names are long: claimed one per free slot until one has run here."""
        average = self.average.get(name)
        return average is None or average >= TARGET_SECONDS

    def prefetch(self, concurrency: int) -> int:
        """Jobs to hold beyond the executors: ``TARGET_SECONDS`` of the slowest name in the
        recent mix per executor; none while that name is long or unknown."""
        now = time.monotonic()
        recent = [n for n, at in self.last_claimed.items() if now - at <= RECENT_SECONDS]
        if not recent or any(self.is_long(name) for name in recent):
            return 0
        slowest = max(self.average[name] for name in recent)
        wanted = int(TARGET_SECONDS * concurrency / max(slowest, 1e-6))
        return max(0, min(wanted, MAX_HELD - concurrency))


class Prefetch:
    """How many jobs to hold beyond the executors now: ``fixed`` (``--prefetch``), or adaptive
    when that is None (``adaptive`` then learns from the durations observed)."""

    def __init__(self, fixed: int | None, concurrency: int) -> None:
        self.fixed = fixed
        self.concurrency = concurrency
        self.adaptive = AdaptivePrefetch() if fixed is None else None

    def current(self) -> int:
        if self.adaptive is None:
            return self.fixed
        return self.adaptive.prefetch(self.concurrency)

    def observe(self, name: str, seconds: float) -> None:
        """A job of ``name`` ran for ``seconds``."""
        if self.adaptive is not None:
            self.adaptive.observe(name, seconds)
