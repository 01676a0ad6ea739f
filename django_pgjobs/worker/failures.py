"""The failure policy: what becomes of a job that did not succeed.

A failed attempt is retried after its job's backoff (or the delay of a ``Retry``), or
dead-lettered when it was the last or the job says not to retry it (``decisions.py``); a
job this worker cannot run (unknown name, arguments that do not fit: ``admission.py``) is
dead-lettered at once;
a job whose first statement met a connection that had died while idle is handed back without
spending an attempt. A job whose abort was requested (or that raised ``Aborted``) is never
retried: it is dead-lettered as aborted. Every step is fenced by the claim token and rides out
database faults. Dispatcher thread only.
"""

from __future__ import annotations

import logging
from collections import Counter

from .. import errors, operations, redaction, signals, tracing
from ..operations import ClaimedJob
from .admission import Refusal
from .decisions import decide
from .faults import DispatcherDatabase
from .lookup import definition_of
from .outcomes import HandBack, one_line, send
from .state import DispatcherState

logger = logging.getLogger("django_pgjobs.worker")

# A job handed back for a worker that knows its name is due again this much later: the workers
# that do not know it do not claim it again and again meanwhile.
UNKNOWN_RECHECK_SECONDS = 5.0


def printable(name: str) -> str:
    """A forged row's name is anything: printed as a literal, it cannot fake log lines."""
    return name if name.isprintable() else repr(name)


class FailurePolicy:
    def __init__(
        self,
        db: DispatcherDatabase,
        state: DispatcherState,
        worker_id: str,
        sender: type,
        unknown_grace: float = 0.0,
        release: str = "",
    ) -> None:
        self.db = db
        self.state = state
        self.worker_id = worker_id
        self.sender = sender  # of the signals sent
        self.unknown_grace = unknown_grace  # UNKNOWN_JOB_GRACE_SECONDS
        self.release = release or "unknown"  # RELEASE, for the log lines

    def refuse_all(self, refused: list[tuple[ClaimedJob, Refusal]]) -> list[ClaimedJob]:
        """The jobs this worker cannot run (``admission.py``): those it does not know, enqueued
        within the grace, go back for a worker that knows them (one statement); the others
        are dead-lettered. Returns the jobs handed back."""
        unknown = [job for job, refusal in refused if refusal.unknown]
        returned: set[int] = set()
        if unknown and self.unknown_grace > 0:
            returned = self._defer(unknown)
        for job, refusal in refused:
            if job.id not in returned:
                self.refuse(job, refusal, waited=refusal.unknown and self.unknown_grace > 0)
        return [job for job in unknown if job.id in returned]

    def _defer(self, jobs: list[ClaimedJob]) -> set[int]:
        db = self.db
        returned = db.with_retries(
            lambda: operations.defer_unknown_jobs(
                db.connection(),
                jobs,
                grace_seconds=self.unknown_grace,
                delay=UNKNOWN_RECHECK_SECONDS,
            )
        )
        for job in jobs:
            if job.id in returned:
                self.state.forget(job)
        if returned:
            self.state.stats.released += len(returned)
            names = Counter(job.name for job in jobs if job.id in returned)
            logger.warning(
                "handed back %d job(s) this worker (release %s) does not know, attempt not "
                "spent, for a worker that does: %s; each is dead-lettered once "
                "UNKNOWN_JOB_GRACE_SECONDS (%gs) have passed since its enqueue",
                len(returned),
                self.release,
                ", ".join(f"{printable(name)} ({n})" for name, n in sorted(names.items())),
                self.unknown_grace,
            )
        return returned

    def refuse(self, job: ClaimedJob, refusal: Refusal, waited: bool = False) -> None:
        """Dead-letter a job this worker cannot run (``admission.py``); ``waited``: a job
        unknown here, enqueued longer than ``UNKNOWN_JOB_GRACE_SECONDS`` ago."""
        reason = refusal.reason
        if waited:
            reason = (
                f"{reason} (release {self.release}), still unknown "
                f"{self.unknown_grace:g}s after its enqueue (UNKNOWN_JOB_GRACE_SECONDS)"
            )
        entry = errors.error_entry(
            job.attempts,
            error_type=refusal.error_type,
            message=str(refusal.error),
            worker=self.worker_id,
        )
        self.dead_letter(job, reason=reason, error=entry)

    def record_failure(
        self, job: ClaimedJob, error: BaseException, *, retry_at_least: float = 0.0
    ) -> None:
        """Record ``error`` as the end of ``job``'s attempt: retried (not before
        ``retry_at_least`` seconds), dead-lettered, or aborted."""
        state = self.state
        state.owner.check()
        entry = errors.error_entry(job.attempts, error, worker=self.worker_id)
        entry = redaction.hide_secrets(entry, job)  # stored, shown and logged: no secrets
        summary = f"{entry['type']}: {one_line(entry['message'])}"
        if job.abort_requested or isinstance(error, errors.Aborted):
            state.finished(job)
            if not self._dead_letter_aborted(job, entry, summary):
                state.stats.lost += 1
            return
        decision = decide(job, definition_of(job), error, summary)
        if decision.retry_in is None:
            self.dead_letter(job, reason=decision.reason, error=entry)
            return
        delay = max(decision.retry_in, retry_at_least)
        state.finished(job)
        db = self.db
        if db.with_retries(lambda: operations.retry_job(db.connection(), job, entry, delay)):
            state.stats.retried += 1
            state.metrics.retried(job)
            tracing.outcome(job, tracing.RETRYING)
            send(signals.job_failed, self.sender, job=job, error=error, retry_in=delay)
            logger.warning(
                "job %s #%s failed (attempt %d/%d): %s; retrying in %.1fs",
                job.name,
                job.id,
                job.attempts,
                job.max_attempts,
                summary,
                delay,
            )
        elif not self._dead_letter_aborted(job, entry, summary):
            state.stats.lost += 1
            logger.warning(
                "job %s #%s failed but its lease was lost; its new owner decides", job.name, job.id
            )

    def _dead_letter_aborted(self, job: ClaimedJob, entry: dict, summary: str) -> bool:
        """Dead-letter a finished job as aborted (also when the retry found its abort requested
        before this worker learned of it); False when the job is no longer held."""
        db = self.db
        dead_id = db.with_retries(
            lambda: operations.dead_letter_aborted(
                db.connection(), job, summary=summary, error=entry
            )
        )
        if dead_id is None:
            return False
        self._dead_lettered(job, dead_id, f"aborted: {summary}")
        return True

    def dead_letter(self, job: ClaimedJob, *, reason: str, error: dict) -> None:
        state = self.state
        state.owner.check()
        state.finished(job)
        db = self.db
        dead_id = db.with_retries(
            lambda: operations.dead_letter_job(db.connection(), job, reason=reason, error=error)
        )
        if dead_id is None:
            state.stats.lost += 1
            return
        self._dead_lettered(job, dead_id, reason)

    def _dead_lettered(self, job: ClaimedJob, dead_id: int, reason: str) -> None:
        self.state.stats.dead_lettered += 1
        self.state.metrics.dead_lettered(job)
        tracing.outcome(job, tracing.DEAD_LETTERED)
        send(signals.job_dead_lettered, self.sender, job=job, reason=reason)
        logger.error(
            "job %s #%s dead-lettered (#%s): %s", printable(job.name), job.id, dead_id, reason
        )

    def hand_back(self, item: HandBack) -> None:
        """Give back, attempt not spent, a job whose first statement found its executor's
        connection dead (dropped while idle: nothing the job did)."""
        self.state.owner.check()
        db = self.db
        released = db.with_retries(lambda: operations.release_jobs(db.connection(), [item.job]))
        self.state.finished(item.job)
        if released:
            self.state.stats.released += 1
        logger.warning(
            "job %s #%s handed back without spending an attempt: its first statement found the "
            "connection dead (%s)",
            item.job.name,
            item.job.id,
            one_line(item.error),
        )
