"""``runjobs --reload``: the worker restarted whenever the project's code changes, by Django's own
autoreloader (``django.utils.autoreload.run_with_reloader``, as ``runserver`` does). For
development only.

The first process only watches over a child process, started again each time it exits with
status 3. In the child, the worker runs on Django's "django-main-thread" and the reloader on the
main thread. When a watched file changes (any imported module, a job module included), the
reloader's ``file_changed`` signal comes here first: the worker is stopped as on SIGTERM, its
held jobs handed back and its running jobs given the shutdown grace to finish, and only then does
Django end the process for the next one to start with the new code. SIGTERM to the child stops
the worker the same way; Ctrl-C in a terminal gives the child only the quarter of a second
``subprocess`` waits before killing it (a running job then comes back after its lease).
"""

from __future__ import annotations

import logging
import threading

from django.utils import autoreload

from .worker import Worker

logger = logging.getLogger("django_pgjobs.worker")

#: Seconds, beyond the shutdown grace, that a stopping worker's thread is waited for.
JOIN_MARGIN_SECONDS = 10.0


class ReloadingWorker:
    """``ReloadingWorker(worker).run()``: ``worker`` (built with
    ``install_signal_handlers=False``: it runs off the main thread) in the child process of
    Django's autoreloader; returns when the process is to end."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        autoreload.file_changed.connect(self._file_changed, weak=False)
        try:
            autoreload.run_with_reloader(self._work)
        finally:  # the reload's sys.exit(3), SIGTERM's sys.exit(0), Ctrl-C
            self.stop()

    def _work(self) -> None:
        """(django-main-thread.)"""
        self.thread = threading.current_thread()
        code = self.worker.run()
        logger.info("worker stopped (status %d); a code change starts it again", code)

    def _file_changed(self, sender, file_path, **kwargs) -> None:
        """(The reloader's thread.) Returns None: Django goes on to reload."""
        logger.info("%s changed: stopping the worker before reloading", file_path)
        self.stop()

    def stop(self) -> None:
        """Stop the worker gracefully and wait for its thread (held jobs handed back)."""
        if self.thread is None or not self.thread.is_alive():
            return
        self.worker.request_stop()
        self.thread.join(self.worker.options.shutdown_grace + JOIN_MARGIN_SECONDS)
