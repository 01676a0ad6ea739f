"""The error entries of a job's history: the type each error is stored under (``errors.py``)."""

from __future__ import annotations

import inspect

import pytest

from django_pgjobs import Aborted, Discard, JobTimeout, Retry
from django_pgjobs.errors import error_entry
from django_pgjobs.worker import (
    ConnectionClosedByJob,
    LeaseLost,
    RolledBack,
    TransactionLeftOpen,
)

#: What rows in users' databases hold for the package's own errors: never to change.
STORED = [
    (JobTimeout, "django_pgjobs.JobTimeout"),
    (Aborted, "django_pgjobs.Aborted"),
    (Retry, "django_pgjobs.Retry"),
    (Discard, "django_pgjobs.Discard"),
    (LeaseLost, "django_pgjobs.worker.LeaseLost"),
    (RolledBack, "django_pgjobs.worker.RolledBack"),
    (ConnectionClosedByJob, "django_pgjobs.worker.ConnectionClosedByJob"),
    (TransactionLeftOpen, "django_pgjobs.worker.TransactionLeftOpen"),
]


@pytest.mark.parametrize(("kind", "stored"), STORED)
def test_the_package_errors_keep_the_stored_types_rows_hold(kind, stored):
    assert error_entry(1, kind())["type"] == stored


@pytest.mark.parametrize(("kind", "stored"), STORED)
def test_the_package_errors_say_where_they_are_defined(kind, stored):
    """Their stored name is not their ``__module__``: tracebacks, ``help()`` and "go to
    definition" find the class in its own file."""
    assert inspect.getsource(kind).startswith(f"class {kind.__name__}(")
    assert error_entry(1, kind())["traceback"].startswith(f"{kind.__module__}.{kind.__name__}")


class Throttled(Retry):  # noqa: N818 - a handler's own Retry
    pass


def test_a_subclass_is_stored_under_its_own_name():
    assert error_entry(1, Throttled())["type"] == f"{__name__}.Throttled"
    assert error_entry(1, ValueError("no"))["type"] == "ValueError"  # builtins: the bare name
