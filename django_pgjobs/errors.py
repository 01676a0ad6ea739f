"""A failed attempt as one entry of a job's ``errors`` list: type, message, traceback.

Whatever a handler raised, the entry is text jsonb can store and of bounded size, so recording a
failure can never fail in turn.

An error's stored type is ``module.qualname`` of its class (``builtins.`` left out), except for
the package's own errors: a class declaring ``stored_error_type`` is stored under that name
(``django_pgjobs.JobTimeout``), which stays what rows hold wherever the class moves.
"""

from __future__ import annotations

import traceback as tb
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from .conf import get_config
from .limits import ERROR_TYPE_MAX


def error_entry(
    attempt: int,
    error: BaseException | None = None,
    *,
    error_type: str | None = None,
    message: str | None = None,
    worker: str = "",
    with_traceback: bool = True,
) -> dict[str, Any]:
    """One element of a job's ``errors`` list, truncated to ``MAX_ERROR_CHARS``.

    Whatever a handler raised, the entry is text jsonb can store (see ``_storable``), so recording
    a failure can never fail in turn.
    """
    limit = get_config().MAX_ERROR_CHARS
    if error is not None:
        error_type = error_type or stored_type(type(error)).removeprefix("builtins.")
        message = message if message is not None else _str_of(error)
        try:
            trace = "".join(tb.format_exception(type(error), error, error.__traceback__))
        except Exception:  # noqa: BLE001 - a broken exception must not break the worker
            trace = ""
    else:
        trace = ""
    message = message or ""
    if not with_traceback:
        trace = ""
    return {
        # always with its offset: a naive time (USE_TZ = False) in JSON would be ambiguous
        "at": datetime.now(dt_timezone.utc).isoformat(),
        "attempt": attempt,
        "type": _storable(error_type or "Error")[:ERROR_TYPE_MAX],
        "message": _storable(_truncate(message, limit)),
        "traceback": _storable(_truncate(trace, limit)),
        "worker": worker,
    }


def stored_type(kind: type[BaseException]) -> str:
    """The type name errors of class ``kind`` are stored under: the ``stored_error_type`` the
    class itself declares (a subclass does not inherit it: it is stored under its own name),
    else ``module.qualname``."""
    declared = vars(kind).get("stored_error_type")
    return declared if isinstance(declared, str) else f"{kind.__module__}.{kind.__qualname__}"


def _str_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - same wording as the traceback module
        return "<exception str() failed>"


def _storable(text: str) -> str:
    """``text`` with what jsonb and PostgreSQL text refuse escaped: NUL characters and lone
    surrogates (left by bytes decoded with ``errors="surrogateescape"``)."""
    text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    # keep the head (what was raised) and the tail (where), drop the middle
    head = limit // 2
    return f"{text[:head]}\n[... {cut} characters truncated ...]\n{text[-(limit - head) :]}"


class JobTimeout(Exception):
    """A job ran past its timeout (``@job(timeout=...)``, ``.using(timeout=...)`` or
    ``PGJOBS["DEFAULT_TIMEOUT_SECONDS"]``): a failed attempt, retried or dead-lettered like any
    other."""

    stored_error_type = "django_pgjobs.JobTimeout"


class Aborted(Exception):
    """Raised by a job that stops because its abort was requested (``current_job()
    .raise_if_aborted()``); the attempt ends as aborted: dead-lettered, never retried."""

    stored_error_type = "django_pgjobs.Aborted"
