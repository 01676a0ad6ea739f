"""What a running job can know about itself: ``current_job()`` inside a job function returns
the ``ClaimedJob`` being executed (id, attempts, max_attempts, queue...), or None outside one."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .operations import ClaimedJob

_current: contextvars.ContextVar[ClaimedJob | None] = contextvars.ContextVar(
    "pgjobs_current_job", default=None
)


def current_job() -> ClaimedJob | None:
    return _current.get()


def set_current_job(job: ClaimedJob | None) -> contextvars.Token:
    return _current.set(job)


def reset_current_job(token: contextvars.Token) -> None:
    _current.reset(token)
