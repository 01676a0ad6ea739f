"""docs/howto/databases.md: a queue on a database of its own (tests/test_databases.py runs it
with real ``runjobs`` processes, one per database)."""

from __future__ import annotations

import os

from django_pgjobs import job
from django_pgjobs.context import current_job
from testproject.demo.models import Execution


# Its queue, "heavy", lives on the database "jobs2" (PGJOBS["QUEUE_DATABASES"]): its rows, its
# claims and its retries are there. What it writes through the ORM goes where the project's
# router sends it: Execution rows to "default".
@job(queue="heavy")
def build_report(month: str) -> None:
    running = current_job()
    Execution.objects.create(
        job_id=running.id, attempt=running.attempts, label=f"report:{month}", pid=os.getpid()
    )
