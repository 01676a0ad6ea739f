"""Unique keys: how long a job holds its key, what a newer enqueue of a held key does, and
throttling.

- The **scope** (``unique_scope``): ``"in_flight"`` (the default, as before) holds the key while
  the job waits and while it runs; ``"waiting"`` holds it only until a worker takes the job, so
  one more may wait while one runs.
- **Debounce** (``debounce``): a newer enqueue of a key held by a waiting job replaces that
  job's arguments (``"args"``), moves its ``run_after`` (``"run_after"``), or both (``True``),
  instead of being skipped.
- **Throttle** (``throttle=N``): at most one job of a key per N seconds, even after it
  finished: the key's window is a row of ``pgjobs_throttle`` (``models.ThrottleWindow``) that
  outlives the job, pruned by the worker's Pruner once over.

Each rule is decided by the enqueue statement itself, against a unique index (the key of the
scope ``in_flight`` in ``unique_key``, of the scope ``waiting`` in ``waiting_key``, which the
claim clears) or the primary key of ``pgjobs_throttle``: ``ON CONFLICT ... DO NOTHING`` or
``DO UPDATE``, never a read then a write. What happened comes back as the
``enqueue_outcome`` of the job ``enqueue()`` returns (``EnqueueOutcome``).

Depends on nothing of the package but ``validation``: job modules build these at import time.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from .validation import check_debounce, check_throttle, check_unique_scope

__all__ = ["EnqueueOutcome", "HasUniqueRules", "UniqueRules", "UniqueScope", "rules_for"]


class UniqueScope(str, enum.Enum):
    """How long a job holds its unique key."""

    #: While it waits and while it runs (the default).
    IN_FLIGHT = "in_flight"
    #: Until a worker takes it: a new job of the key may wait while one runs.
    WAITING = "waiting"


class EnqueueOutcome(str, enum.Enum):
    """What an enqueue did, as ``job.enqueue_outcome`` says."""

    #: A new job was inserted (every job without a unique key).
    CREATED = "created"
    #: A debounced enqueue updated the waiting job holding the key (the job returned).
    REPLACED = "replaced"
    #: Nothing was written: the key is held (the holder is returned) or its throttle window is
    #: taken (the job holding the key is returned if there is one, else an unsaved job).
    SKIPPED = "skipped"


@dataclasses.dataclass(frozen=True)
class UniqueRules:
    """The rules of one enqueue with a unique key; None: not given (the job's, then the
    defaults apply). Checked when built: a bad value or combination raises ``ValueError``."""

    unique_scope: str | None = None
    debounce: bool | str | None = None
    throttle: float | None = None

    def __post_init__(self) -> None:
        checks = (
            (check_unique_scope, self.unique_scope),
            (check_debounce, self.debounce),
            (check_throttle, self.throttle),
        )
        for check, value in checks:
            if value is not None:
                check(value)
        if self.debounce and self.throttle is not None:
            raise ValueError(
                "debounce and throttle cannot be combined: a throttled key lets one job through "
                "per window and skips the others, a debounced one folds them into the waiting "
                "job; choose one"
            )

    @property
    def waiting(self) -> bool:
        return self.unique_scope == UniqueScope.WAITING

    def then(self, later: UniqueRules) -> UniqueRules:
        """These rules with the ones given ``later`` on top (a ``debounce`` given drops a
        ``throttle`` and the other way round: the later wins)."""
        given = {
            field.name: value
            for field in dataclasses.fields(later)
            if (value := getattr(later, field.name)) is not None
        }
        if given.get("debounce"):
            given.setdefault("throttle", None)
        if "throttle" in given:
            given.setdefault("debounce", None)
        return dataclasses.replace(self, **given)

    @property
    def plain(self) -> bool:
        """The rules every key had before: scope ``in_flight``, a held key skipped, no throttle
        (the plain ``enqueue_job`` statement applies them)."""
        return not self.waiting and not self.debounce and self.throttle is None

    def params(self, unique_key: str) -> dict[str, Any]:
        """The statement's parameters for the key (the row's key columns included)."""
        debounce = self.debounce or False
        return {
            "unique_key": None if self.waiting else unique_key,
            "waiting_key": unique_key if self.waiting else None,
            "replace_args": debounce in (True, "args"),
            "move_run_after": debounce in (True, "run_after"),
            "throttle_key": unique_key,
            "throttle": self.throttle,
        }


class HasUniqueRules:
    """What a job's definition and a call's options share: their ``unique_scope``,
    ``debounce`` and ``throttle`` fields, as ``UniqueRules``."""

    unique_scope: str | None
    debounce: bool | str | None
    throttle: float | None

    @property
    def unique_rules(self) -> UniqueRules:
        return UniqueRules(self.unique_scope, self.debounce, self.throttle)

    def gives_unique_rules(self) -> bool:
        """Whether any of the three is given (cheap: read on every enqueue without a key)."""
        return (
            self.unique_scope is not None or self.debounce is not None or self.throttle is not None
        )


def rules_for(definition: Any, options: Any) -> UniqueRules:
    """The rules of a call: the job's (``@job(unique_scope=..., debounce=..., throttle=...)``)
    with the call's (``.using(...)``) on top."""
    return definition.unique_rules.then(options.unique_rules)
