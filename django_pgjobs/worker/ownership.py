"""Which thread may touch what, checked where it is cheap (see the package docstring)."""

from __future__ import annotations

import threading


class WrongThread(AssertionError):
    """A structure owned by one thread was touched from another."""


class ThreadOwner:
    """The thread that owns some structures: ``check()`` fails from any other thread.

    Unset until ``take()``: a worker not yet running (a test driving its parts directly) is
    owned by whoever drives it.
    """

    def __init__(self, role: str) -> None:
        self.role = role
        self.ident: int | None = None

    def take(self) -> None:
        self.ident = threading.get_ident()

    def release(self) -> None:
        self.ident = None

    def check(self) -> None:
        if self.ident is not None and threading.get_ident() != self.ident:
            raise WrongThread(
                f"touched from thread {threading.current_thread().name!r}; only the "
                f"{self.role} thread may (django_pgjobs.worker: thread ownership)"
            )
