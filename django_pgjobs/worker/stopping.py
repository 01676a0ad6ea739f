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
from collections.abc import Callable

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

    def __init__(
        self,
        stop: StopState,
        wake: Callable[[], None],
        running: Callable[[], list],
        enabled: bool = True,
    ) -> None:
        self.stop = stop
        self.wake = wake  # wakes the dispatcher: run off the handler (see on_signal)
        self.running = running  # the jobs the worker holds, for the log line
        self.enabled = enabled
        self.previous: dict = {}

    def install(self) -> None:
        if not self.enabled or threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self.on_signal)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def on_signal(self, signum, frame) -> None:
        """Runs on the main thread, between two of its bytecodes: maybe while that thread holds
        the lock of the dispatcher's inbox (in its ``get``). So the handler only sets the stop
        (events nobody waits on under a lock) and wakes the dispatcher from another thread:
        putting on the inbox here could wait for ever on a lock its own thread holds."""
        name = signal.Signals(signum).name
        if self.stop.requested.is_set():
            logger.warning(
                "%s again: not waiting for running jobs; exiting within %gs",
                name,
                FORCED_EXIT_SECONDS,
            )
            self.stop.request(force=True)
            exit_after(FORCED_EXIT_SECONDS)
        else:
            held = self.running()
            waiting = sum(1 for job in held if job.held)  # prefetched: handed back unstarted
            logger.info(
                "%s: stopping; waiting up to %gs for %d running job(s)%s",
                name,
                self.stop.grace,
                len(held) - waiting,
                f" ({waiting} prefetched, handed back unstarted)" if waiting else "",
            )
            self.stop.request()
        threading.Thread(target=self.wake, name="pgjobs-signal-wake", daemon=True).start()


def exit_after(seconds: float) -> None:
    """Leave the process after ``seconds`` if the orderly exit has not happened by then."""

    def exit_now() -> None:
        time.sleep(seconds)
        logger.warning("forced stop: exiting now; claimed jobs return when their lease expires")
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=exit_now, name="pgjobs-forced-exit", daemon=True).start()
