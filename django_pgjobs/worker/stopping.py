"""Stopping: the graceful-stop request, OS signals, and the watchdog on a second signal.

The first SIGTERM/SIGINT stops claiming and gives running jobs ``shutdown_grace`` seconds; the
second gives up on them, and a watchdog thread ends the process ``FORCED_EXIT_SECONDS`` later
whatever the database does (a statement or a connection attempt can hang on an unreachable
server).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

logger = logging.getLogger("django_pgjobs.worker")

FORCED_EXIT_SECONDS = 1.5


class StopState:
    """Whether a stop was requested, and when waiting on the database must end.

    Set from any thread (signal handler, an executor seeing KeyboardInterrupt); read by all.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.requested = threading.Event()  # graceful shutdown requested
        self.forced = threading.Event()  # second signal: give up on running jobs now
        self.give_up_at: float | None = None  # stop requested: database waits end here

    def request(self, force: bool = False) -> None:
        if force or self.requested.is_set():
            self.forced.set()
            self.give_up_at = time.monotonic()
        elif self.give_up_at is None:
            self.give_up_at = time.monotonic() + self.grace
        self.requested.set()

    def past_give_up(self) -> bool:
        return self.give_up_at is not None and time.monotonic() >= self.give_up_at

    def sleep(self, seconds: float) -> None:
        """Wait, but not past the end of the shutdown grace (nor at all after a second signal:
        callers check ``past_give_up`` before waiting again, so this never spins)."""
        deadline = time.monotonic() + seconds
        while not self.forced.is_set():
            # a stop requested meanwhile shortens the wait
            left = min(deadline, self.give_up_at or deadline) - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))


class SignalHandlers:
    """SIGTERM/SIGINT handlers for a worker run in the main thread; restored after the run."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.previous: dict = {}

    def install(self) -> None:
        if (
            not self.worker.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self.on_signal)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        worker = self.worker
        if worker.stop.requested.is_set():
            logger.warning(
                "%s again: not waiting for running jobs; exiting within %gs",
                name,
                FORCED_EXIT_SECONDS,
            )
            worker.request_stop(force=True)
            exit_after(FORCED_EXIT_SECONDS)
        else:
            logger.info(
                "%s: stopping; waiting up to %gs for %d running job(s)",
                name,
                worker.shutdown_grace,
                len(worker.held),
            )
            worker.request_stop()


def exit_after(seconds: float) -> None:
    """Leave the process after ``seconds`` if the orderly exit has not happened by then."""

    def exit_now() -> None:
        time.sleep(seconds)
        logger.warning("forced stop: exiting now; claimed jobs return when their lease expires")
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=exit_now, name="pgjobs-forced-exit", daemon=True).start()
