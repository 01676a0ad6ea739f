"""Immediate mode (``PGJOBS["IMMEDIATE"] = True``), for development and tests: a job enqueued
in a transaction runs in this process when that transaction commits, and not at all when it
rolls back; enqueued in autocommit, it runs at once.

It runs through the worker (``testing.run_burst``): the job's row is claimed, its arguments are
read back from the JSON stored, its outcome is recorded by the production statements (retries,
dead letters, kept results). The claim takes only the jobs this thread enqueued
(``WorkerOptions.only_ids``), never another process's, nor a job due later (``delay=``,
``run_after=``, a retry's back-off): those wait for a worker or ``run_jobs()``.

How: a receiver of ``job_enqueued`` notes the new job's id and registers an ``on_commit``
callback; the first callback to run takes every id noted so far on this thread and runs those
jobs in one burst (a bulk enqueue runs in one). A rolled-back transaction or savepoint discards
its callbacks; its ids may stay noted, but their rows are gone and ids are never reused, so a
later run claims nothing for them.

Unlike Celery's ``task_always_eager``, nothing is called in the caller's stack: a failing job
does not raise into the view that enqueued it, it is retried or dead-lettered as in production.
The system check ``pgjobs.E006`` refuses immediate mode when ``DEBUG`` is off, unless
``PGJOBS["IMMEDIATE_WITHOUT_DEBUG"]`` says it is meant (a test settings module).
"""

from __future__ import annotations

import threading

from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver

from . import signals
from .conf import ConfigError, get_config

_noted = threading.local()  # .ids: {database alias: [job id, ...]} enqueued, not yet run


def listen_if_enabled() -> None:
    """Receive ``job_enqueued`` only in immediate mode: a bulk enqueue sends the signal once per
    job only when someone listens (``enqueueing.enqueue_many``)."""
    try:
        enabled = get_config().IMMEDIATE
    except ConfigError:
        enabled = False  # reported by pgjobs.E002
    if enabled:
        signals.job_enqueued.connect(run_when_committed, dispatch_uid=__name__)
    else:
        signals.job_enqueued.disconnect(dispatch_uid=__name__)


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs) -> None:
    if setting == "PGJOBS":
        get_config.cache_clear()  # whichever receiver runs first
        listen_if_enabled()


def run_when_committed(sender, job, created: bool, **kwargs) -> None:
    """Run ``job`` when the transaction that enqueued it commits."""
    if not created:
        return
    alias = job._state.db
    noted = _noted.__dict__.setdefault("ids", {})
    noted.setdefault(alias, []).append(job.pk)

    def run_enqueued_jobs_after_commit() -> None:  # named: Django logs callbacks by __qualname__
        ids = noted.pop(alias, None)
        if ids:
            from .testing import run_burst

            run_burst(only_ids=ids, database=alias)

    connections[alias].on_commit(run_enqueued_jobs_after_commit)
