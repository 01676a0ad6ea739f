"""What a failed attempt leads to: another attempt after a delay, or the dead letters.

In order: a return value that could not be kept (``ResultNotJSON``) dead-letters at once: the
job ran to its end, its side effects happened, and it would return the same again;
``Discard`` dead-letters at once; ``Retry`` runs the job again after its ``after``
(the job's backoff when None), or dead-letters it when that was the last attempt (the attempt
is spent: attempts are counted at claim, so a handler that always asks cannot loop forever);
an exception of the job's ``discard_on`` dead-letters at once, and so does one outside its
``retry_on`` when it has one; otherwise the job's backoff, until ``max_attempts``. Pure: the
dispatcher's ``FailurePolicy.record_failure`` acts on the decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..operations import ClaimedJob
from ..payload import ResultNotJSON
from ..registry import JobDefinition
from ..retries import Discard, Retry


@dataclass(frozen=True)
class Decision:
    """``retry_in`` seconds before the next attempt, or None: dead-letter with ``reason``."""

    retry_in: float | None = None
    reason: str = ""


def decide(
    job: ClaimedJob, definition: JobDefinition, error: BaseException, summary: str
) -> Decision:
    """``summary``: the stored error in one line (type: message), secrets hidden."""
    attempts = f"({job.attempts}/{job.max_attempts})"
    if isinstance(error, ResultNotJSON):
        return Decision(
            reason=f"its result cannot be stored, not retried (the job ran: another attempt "
            f"would repeat its work and fail the same way): {summary}"
        )
    if isinstance(error, Discard):
        return Decision(reason=f"discarded by the job: {summary}")
    if isinstance(error, Retry):
        if job.is_last_attempt:
            return Decision(reason=f"retry requested on the last attempt {attempts}: {summary}")
        if error.after is not None:
            return Decision(retry_in=error.after)
    elif isinstance(error, definition.discard_on):
        return Decision(reason=f"discard_on of {job.name} holds this exception: {summary}")
    elif definition.retry_on is not None and not isinstance(error, definition.retry_on):
        return Decision(reason=f"not retried (not in retry_on of {job.name}): {summary}")
    if job.is_last_attempt:
        return Decision(reason=f"attempts exhausted {attempts}: {summary}")
    return Decision(retry_in=definition.get_retry().delay(job.attempts))
