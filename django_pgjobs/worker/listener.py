"""The listener: a thread that wakes the dispatcher as soon as a job is enqueued, and tells it
at once of aborts requested (``aborts.py``).

It holds its own connection (thread-local, in LISTEN ``pgjobs`` and ``pgjobs_abort``), touches
nothing else, and speaks to the dispatcher only through its ``Inbox``: ``wake()`` and
``AbortNotice`` messages. It never dies: a lost connection is re-opened with a doubling back-off, and a wake is
sent after each (re)connection for what was enqueued while it was not listening.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from django.db import connections

from ..flow import FLOW_WAKE_PREFIX
from .aborts import ABORT_CHANNEL, parse_notice
from .faults import FIRST_WAIT_SECONDS, next_wait
from .outcomes import Inbox, one_line
from .stopping import StopState

logger = logging.getLogger("django_pgjobs.worker")

NOTIFY_CHANNEL = "pgjobs"


class Listener:
    def __init__(
        self, alias: str, queues: Sequence[str] | None, stop: StopState, inbox: Inbox
    ) -> None:
        self.alias = alias
        self.wanted = set(queues) if queues else None  # None: every queue
        self.stop = stop
        self.inbox = inbox
        self.thread = threading.Thread(target=self.run, name="pgjobs-listener", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        """Wake the dispatcher on NOTIFY pgjobs (payload: the queue of a due job, ``flow:<queue>``
        for a job with a flow key: its flow claim too); pass on
        NOTIFY pgjobs_abort (payload: job ids, comma-separated) as an ``AbortNotice``."""
        inbox, wanted = self.inbox, self.wanted
        stop = self.stop.requested
        delay = FIRST_WAIT_SECONDS
        while not stop.is_set():
            connection = connections[self.alias]
            try:
                connection.ensure_connection()
                raw = connection.connection
                raw.execute(f"LISTEN {ABORT_CHANNEL}")
                raw.execute(f"LISTEN {NOTIFY_CHANNEL}")  # last: pg_stat_activity shows it
                inbox.wake_flow()  # anything enqueued while we were not listening
                delay = FIRST_WAIT_SECONDS
                while not stop.is_set():
                    for notify in raw.notifies(timeout=0.25):
                        if notify.channel == ABORT_CHANNEL:
                            notice = parse_notice(notify.payload)
                            if notice is not None:
                                inbox.put(notice)
                        elif notify.payload.startswith(FLOW_WAKE_PREFIX):
                            queue = notify.payload[len(FLOW_WAKE_PREFIX) :]
                            if wanted is None or queue in wanted:
                                inbox.wake_flow()
                        elif wanted is None or notify.payload in wanted:
                            inbox.wake()
                        if stop.is_set():
                            break
            except Exception as error:  # noqa: BLE001 - the listener must never die
                logger.info("listener reconnecting in %.1fs: %s", delay, one_line(error))
                try:
                    connection.close()
                except Exception:  # noqa: BLE001
                    pass
                self.stop.sleep(delay)
                delay = next_wait(delay)
        connections.close_all()
