"""Signals for instrumentation. Receivers run in the worker (or enqueuing) process; keep them
quick and never let them raise: an exception in a receiver is logged and ignored by the worker.

- ``job_enqueued(job, created, outcome)``: after the INSERT (``outcome``: an
  ``EnqueueOutcome``, also ``job.enqueue_outcome``; ``created`` is False when a job with the same
  unique key was replaced (debounce) or skipped, the job returned being that one).
- ``job_started(job)``: a worker is about to call the function; ``job`` is a ``ClaimedJob``.
- ``job_succeeded(job, duration)``: the function returned (the completion may still be batched).
- ``job_failed(job, error, retry_in)``: the function raised and the job will be retried.
- ``job_dead_lettered(job, reason)``: the job was moved to the dead-letter table.
"""

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_succeeded = Signal()
job_failed = Signal()
job_dead_lettered = Signal()
