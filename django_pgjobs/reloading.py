"""``runjobs --reload``: the worker restarted whenever the project's code changes, by Django's own
autoreloader (``django.utils.autoreload.run_with_reloader``, as ``runserver`` does). For
development only.

The first process only watches over a child process, started again each time it exits with
status 3. In the child, the worker runs on Django's "django-main-thread" and the reloader on the
main thread. When a watched file changes (any imported module, a job module included), the
reloader's ``file_changed`` signal comes here first: the worker is stopped as on SIGTERM, its
held jobs handed back and its running jobs given the shutdown grace to finish, and only then does
Django end the process for the next one to start with the new code. SIGTERM to the child stops
the worker the same way, and so does SIGTERM to the first process (``docker stop`` signals it):
it passes the signal on to the child and waits for it, where Django's own loop ended at once
and killed the child. Ctrl-C in a terminal reaches both processes: the first one waits for the
child, which stops as on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
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
        if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) != "true":
            sys.exit(watch_over_children())  # the first process: no worker of its own
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


def watch_over_children() -> int:
    """(The first process.) Start the worker's process again each time it exits with status 3
    (a code change), as Django's ``restart_with_reloader`` does, passing SIGTERM on to it and
    waiting through SIGINT (a terminal's Ctrl-C reaches the child too); returns its status."""
    arguments = autoreload.get_child_arguments()
    environment = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    children: list[subprocess.Popen] = []
    stopping = []

    def pass_on(signum, frame) -> None:
        stopping.append(signum)
        if children and children[-1].poll() is None:
            children[-1].send_signal(signal.SIGTERM)

    def wait_for_the_child(signum, frame) -> None:
        """SIGINT: the terminal's Ctrl-C reached the child too, which stops on it (passed on,
        it would be a second signal there: running jobs given up). Here it only means that no
        child is started after this one, even if this one ends for a code change."""
        stopping.append(signum)

    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, pass_on),
        # a handler, not SIG_IGN: an ignored signal stays ignored in the child, whose Ctrl-C
        # then did nothing at all (a handler is reset there to the default)
        signal.SIGINT: signal.signal(signal.SIGINT, wait_for_the_child),
    }
    try:
        while not stopping:
            children.append(subprocess.Popen(arguments, env=environment, close_fds=False))
            if stopping:  # a SIGTERM while it was being started
                children[-1].send_signal(signal.SIGTERM)
            status = children[-1].wait()
            if status != 3:
                return status
        return 0
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
