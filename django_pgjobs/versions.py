"""Payload versions: ``@job(version=2, upgrade={1: upgrade_v1})``.

A job row carries the version of its job's payload it was enqueued with (``pgjobs_job.version``,
1 for jobs of a ``@job`` without ``version``). A worker whose definition has a higher version
upgrades the row's arguments before the call, one step at a time: ``upgrade[n]`` takes the
arguments of version ``n`` as ``(args, kwargs)`` and returns those of version ``n + 1``. The
upgraded arguments are then checked against the function as every job's are. The row itself is
left as it was (a retry upgrades again), so an upgrade function must be pure.

A row whose version has no path to the definition's (a missing step, or an upgrade that
raised) is refused: dead-lettered with the reason, never called with the wrong arguments. A
row of a higher version than this worker knows was enqueued by a newer release: it is refused
as "unknown here", so a rolling deploy hands it back for a newer worker (see
``worker/admission.py``). ``checks.check_job_versions`` reports versions without a step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Upgrade = Callable[[list, dict], tuple[list, dict]]


class CannotUpgrade(Exception):
    """A row's arguments cannot be brought to its job's version; ``error_type`` and the message
    are the dead letter's."""

    def __init__(self, error_type: str, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.newer = newer  # enqueued by a newer release: another worker may know the version


def check_options(name: str, version: Any, upgrade: Any) -> dict[int, Upgrade]:
    """``version``/``upgrade`` of ``@job``, checked; returns the upgrade steps as a dict."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{name}: version must be an int from 1, not {version!r}")
    steps = dict(upgrade or {})
    for step, function in steps.items():
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step < version:
            raise ValueError(
                f"{name}: upgrade keys are the versions upgraded from, 1 to {version - 1} "
                f"(version={version}), not {step!r}"
            )
        if not callable(function):
            raise ValueError(f"{name}: upgrade[{step}] must be a function (args, kwargs)")
    return steps


def skipped_versions(version: int, upgrade: Mapping[int, Upgrade] | None) -> list[int]:
    """Versions below ``version`` with no upgrade step: their rows cannot run."""
    return [step for step in range(1, version) if step not in (upgrade or {})]


def upgrade_arguments(
    name: str, version: int, upgrade: Mapping[int, Upgrade] | None, row_version: int, args, kwargs
) -> tuple[list, dict]:
    """The arguments of a row of ``row_version``, upgraded to ``version``; ``CannotUpgrade``
    when there is no path."""
    if row_version == version:
        return args, kwargs
    if row_version > version:
        raise CannotUpgrade(
            "UnknownVersion",
            f"{name}: the row is of version {row_version}, this worker knows versions up to "
            f"{version} (enqueued by a newer release?)",
            newer=True,
        )
    for step in range(max(row_version, 1), version):
        function = (upgrade or {}).get(step)
        if function is None:
            raise CannotUpgrade(
                "NoUpgradePath",
                f"{name}: no upgrade path from version {row_version} to {version}: "
                f"@job(upgrade=...) has no step from version {step}",
            )
        try:
            args, kwargs = function(list(args), dict(kwargs))
        except Exception as error:  # noqa: BLE001 (a bad upgrade is the row's failure)
            raise CannotUpgrade(
                "UpgradeFailed",
                f"{name}: upgrading the arguments from version {step} to {step + 1} failed: "
                f"{type(error).__name__}: {error}",
            ) from error
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise CannotUpgrade(
                "UpgradeFailed",
                f"{name}: upgrade[{step}] must return (args list, kwargs dict), not "
                f"({type(args).__name__}, {type(kwargs).__name__})",
            )
    return args, kwargs
