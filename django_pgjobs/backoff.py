"""How long a failed job waits before its next attempt.

``delay = min(cap, base * factor ** (attempt - 1))``, then jitter takes a random share of up to
``jitter`` off it, so jobs that failed together (a database blip, a down API) do not come back
together. Defaults come from ``PGJOBS["RETRY_*"]``; a job can carry its own ``RetryPolicy``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .conf import get_config
from .limits import MAX_SECONDS


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 2.0
    factor: float = 2.0
    cap_seconds: float = 3600.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        for option in ("base_seconds", "cap_seconds"):
            value = getattr(self, option)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= MAX_SECONDS
            ):
                raise ValueError(
                    f"RetryPolicy.{option} must be a number of seconds from 0 to "
                    f"{MAX_SECONDS:,} (10 years), not {value!r}"
                )
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or self.factor < 1
        ):
            raise ValueError(f"RetryPolicy.factor must be a number >= 1, not {self.factor!r}")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise ValueError(f"RetryPolicy.jitter must be between 0 and 1, not {self.jitter!r}")

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        config = get_config()
        return cls(
            base_seconds=config.RETRY_BASE_SECONDS,
            factor=config.RETRY_FACTOR,
            cap_seconds=config.RETRY_CAP_SECONDS,
            jitter=config.RETRY_JITTER,
        )

    def ceiling(self, attempt: int) -> float:
        """The delay before jitter after failed attempt number ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        try:
            raw = self.base_seconds * self.factor**exponent
        except OverflowError:
            return self.cap_seconds
        return min(self.cap_seconds, raw)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = self.ceiling(attempt)
        share = (rng or random).random() * self.jitter
        return ceiling * (1.0 - share)
