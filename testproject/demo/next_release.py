"""A job module of "the next release": the rolling-deploy tests (tests/test_rolling_deploys.py)
start a worker that imports it (PGJOBS_TEST_JOB_MODULES) beside one that does not."""

from django_pgjobs import job

from .jobs import _record


@job
def record_next(label: str) -> None:
    """Record one execution (with the job's id and attempt)."""
    _record(label)
