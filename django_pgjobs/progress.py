"""A running job's progress and metadata, on its row: ``current_job().set_progress(done, total,
note="...")`` and ``current_job().set_metadata(key=value, ...)`` (``aset_progress`` /
``aset_metadata`` in an ``async def`` job). The admin shows them on the running view and the
job's page; ``get_result()`` returns them (``progress``, ``metadata``).

Cheap enough to call in a job's inner loop: a progress report is written at most once per
``PROGRESS_WRITE_SECONDS`` (one UPDATE by primary key, fenced by the claim's token); the reports
in between only replace the pending values, which the next write (or the report that reaches
``total``) carries. Metadata is written at once, merged into what the job set before.

The write goes through the job's own connection: in an ``atomic=True`` job it is part of the
job's transaction, so it shows when the job commits and vanishes if it fails.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any, Protocol

from django.utils import timezone

from . import db


class ClaimedJob(Protocol):
    """What this module reads and keeps on a ``claims.ClaimedJob`` (which imports it)."""

    id: int
    claim_token: uuid.UUID
    database: str
    pending_progress: dict[str, Any] | None
    progress_written_at: float


#: Seconds between two progress writes of one job, at most.
PROGRESS_WRITE_SECONDS = 1.0
#: Longest note kept, in characters.
MAX_NOTE_CHARS = 500
#: Largest metadata of one call, as JSON, in bytes.
MAX_METADATA_BYTES = 64 * 1024


def report(job: ClaimedJob, done: float, total: float | None, note: str) -> bool:
    """Record ``done`` of ``total`` (and ``note``) for ``job``; True when written now."""
    job.pending_progress = _progress(done, total, note)
    finished = total is not None and done >= total
    now = time.monotonic()
    if not finished and now - job.progress_written_at < PROGRESS_WRITE_SECONDS:
        return False
    return _write(job, now, metadata=None)


def set_metadata(job: ClaimedJob, values: dict[str, Any]) -> bool:
    """Merge ``values`` into ``job``'s metadata, now (with any pending progress)."""
    try:
        encoded = json.dumps(values, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"metadata must be JSON: {error}") from None
    if len(encoded.encode()) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is over {MAX_METADATA_BYTES} bytes as JSON")
    return _write(job, time.monotonic(), metadata=encoded)


def _write(job: ClaimedJob, now: float, metadata: str | None) -> bool:
    progress = job.pending_progress
    if progress is not None:  # a metadata write alone does not hold back the next report
        job.pending_progress = None
        job.progress_written_at = now
    rows = db.execute(
        db.jobs_connection(job.database or None),
        "set_job_progress",
        {
            "id": job.id,
            "token": job.claim_token,
            "progress": None if progress is None else json.dumps(progress),
            "metadata": metadata,
        },
    )
    return bool(rows)


def _progress(done: float, total: float | None, note: str) -> dict[str, Any]:
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    if not isinstance(note, str):
        raise TypeError(f"note must be a string, not {type(note).__name__}")
    return {
        "done": done,
        "total": total,
        "note": note[:MAX_NOTE_CHARS],
        "at": timezone.now().isoformat(),
    }
