"""The failure policy: what becomes of a job that did not succeed.

A failed attempt is retried after its job's backoff (or the delay of a ``Retry``), or
dead-lettered when it was the last or the job says not to retry it (``decisions.py``); a
job this worker cannot run (unknown name, arguments that do not fit) is dead-lettered at once;
a job whose first statement met a connection that had died while idle is handed back without
spending an attempt. A job whose abort was requested (or that raised ``Aborted``) is never
retried: it is dead-lettered as aborted. Every step is fenced by the claim token and rides out
database faults. Dispatcher thread only.
"""

from __future__ import annotations

import logging

from .. import errors, operations, redaction, registry, signals
from ..operations import ClaimedJob
from .decisions import decide
from .lookup import NotATask, definition_of
from .outcomes import HandBack, one_line, send

logger = logging.getLogger("django_pgjobs.worker")


class FailurePolicy:
    def __init__(self, worker) -> None:
        self.worker = worker

    def admit(self, job: ClaimedJob) -> registry.JobDefinition | None:
        """The definition to run ``job`` with, or None after dead-lettering a job that names no
        registered function (or, for a task row, no Task) or whose arguments do not fit it."""
        try:
            definition = definition_of(job)
            try:
                definition.check_arguments(job.args, job.kwargs)
            except TypeError as error:
                return self._refuse(job, "BadArguments", f"arguments do not fit {job.name}", error)
        except NotATask as error:
            return self._refuse(job, "NotATask", "not a task", error)
        except registry.UnknownJobError as error:
            reason = f"unknown job {job.name!r}: no function is registered under this name"
            return self._refuse(job, "UnknownJob", f"{reason} in this worker", error)
        job.lease_seconds = definition.get_lease_seconds()
        if job.timeout is None:  # the row's (.using(timeout=...)) comes first
            job.timeout = definition.get_timeout()
        return definition

    def _refuse(self, job: ClaimedJob, error_type: str, reason: str, error: Exception) -> None:
        """Dead-letter a job this worker cannot run; ``str(error)`` ends the reason, except for
        an unknown job (its message repeats the name)."""
        message = str(error)
        if error_type != "UnknownJob":
            reason = f"{reason}: {message}"
        entry = errors.error_entry(
            job.attempts, error_type=error_type, message=message, worker=self.worker.id
        )
        self.dead_letter(job, reason=reason, error=entry)

    def record_failure(self, job: ClaimedJob, error: BaseException) -> None:
        worker = self.worker
        worker.owner.check()
        entry = errors.error_entry(job.attempts, error, worker=worker.id)
        entry = redaction.hide_secrets(entry, job)  # stored, shown and logged: no secrets
        summary = f"{entry['type']}: {one_line(entry['message'])}"
        if job.abort_requested or isinstance(error, errors.Aborted):
            worker.finish(job)
            if not self._bury_aborted(job, entry, summary):
                worker.stats.lost += 1
            return
        decision = decide(job, definition_of(job), error, summary)
        if decision.retry_in is None:
            self.dead_letter(job, reason=decision.reason, error=entry)
            return
        delay = decision.retry_in
        worker.finish(job)
        db = worker.db
        if db.with_retries(lambda: operations.retry_job(db.connection(), job, entry, delay)):
            worker.stats.retried += 1
            worker.metrics.retried(job)
            send(signals.job_failed, worker.sender, job=job, error=error, retry_in=delay)
            logger.warning(
                "job %s #%s failed (attempt %d/%d): %s; retrying in %.1fs",
                job.name,
                job.id,
                job.attempts,
                job.max_attempts,
                summary,
                delay,
            )
        elif not self._bury_aborted(job, entry, summary):
            worker.stats.lost += 1
            logger.warning(
                "job %s #%s failed but its lease was lost; its new owner decides", job.name, job.id
            )

    def _bury_aborted(self, job: ClaimedJob, entry: dict, summary: str) -> bool:
        """Dead-letter a finished job as aborted (also when the retry found its abort requested
        before this worker learned of it); False when the job is no longer held."""
        worker = self.worker
        db = worker.db
        dead_id = db.with_retries(
            lambda: operations.dead_letter_aborted(
                db.connection(), job, summary=summary, error=entry
            )
        )
        if dead_id is None:
            return False
        self._buried(job, dead_id, f"aborted: {summary}")
        return True

    def dead_letter(self, job: ClaimedJob, *, reason: str, error: dict) -> None:
        worker = self.worker
        worker.owner.check()
        worker.finish(job)
        db = worker.db
        dead_id = db.with_retries(
            lambda: operations.dead_letter_job(db.connection(), job, reason=reason, error=error)
        )
        if dead_id is None:
            worker.stats.lost += 1
            return
        self._buried(job, dead_id, reason)

    def _buried(self, job: ClaimedJob, dead_id: int, reason: str) -> None:
        worker = self.worker
        worker.stats.dead_lettered += 1
        worker.metrics.dead(job)
        send(signals.job_dead_lettered, worker.sender, job=job, reason=reason)
        # a forged row's name is anything: printed as a literal, it cannot fake log lines
        name = job.name if job.name.isprintable() else repr(job.name)
        logger.error("job %s #%s dead-lettered (#%s): %s", name, job.id, dead_id, reason)

    def hand_back(self, item: HandBack) -> None:
        """Give back, attempt not spent, a job whose first statement found its executor's
        connection dead (dropped while idle: nothing the job did)."""
        worker = self.worker
        worker.owner.check()
        db = worker.db
        released = db.with_retries(lambda: operations.release_jobs(db.connection(), [item.job]))
        worker.finish(item.job)
        if released:
            worker.stats.released += 1
        logger.warning(
            "job %s #%s handed back without spending an attempt: its first statement found the "
            "connection dead (%s)",
            item.job.name,
            item.job.id,
            one_line(item.error),
        )
