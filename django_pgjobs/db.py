"""Running named statements on a Django connection and turning rows into values."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import ProgrammingError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from .conf import get_config
from .payload import Undecodable
from .sql import query


class JobsTableMissing(RuntimeError):
    """The django_pgjobs tables do not exist yet: ``manage.py migrate`` has not run."""


JSON_COLUMNS = frozenset({"args", "kwargs", "errors", "queues", "result", "progress", "metadata"})


def jobs_connection(using: str | None = None) -> BaseDatabaseWrapper:
    return connections[using or get_config().DATABASE]


def _decode(name: str, value: Any) -> Any:
    """A JSON column's text as Python (other values pass through)."""
    if isinstance(value, (str, bytes)):
        if value == "[]" or value == "{}":  # most jobs' args or kwargs: skip the parser
            return [] if value == "[]" else {}
        try:
            return json.loads(value)
        except RecursionError:
            return Undecodable(f"{name} nests deeper than Python can decode")
    return value


def execute(
    connection: BaseDatabaseWrapper, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run the statement ``name`` with ``params``; return the rows as dicts (JSON decoded)."""
    with _missing_tables_named(connection), connection.cursor() as cursor:
        cursor.execute(query(name), params or {})
        return _rows(cursor)


def _rows(cursor) -> list[dict[str, Any]]:
    result = cursor.pgresult  # its column names, without building psycopg Column objects
    if result is None or not result.nfields:
        return []
    encoding = cursor.connection.info.encoding
    names = [result.fname(i).decode(encoding) for i in range(result.nfields)]
    json_names = [name for name in names if name in JSON_COLUMNS]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for name in json_names:  # per column, not per value: the claim's rows go through here
        for row in rows:
            row[name] = _decode(name, row[name])
    return rows


@contextmanager
def _missing_tables_named(connection: BaseDatabaseWrapper) -> Iterator[None]:
    try:
        yield
    except ProgrammingError as error:
        if getattr(getattr(error, "__cause__", None), "sqlstate", None) == "42P01":
            migrate = (
                "migrate"
                if connection.alias == "default"
                else (f"migrate --database {connection.alias}")
            )
            raise JobsTableMissing(
                "The django_pgjobs tables do not exist in the database "
                f"{connection.alias!r}: run `python manage.py {migrate}` first."
            ) from error
        raise


# psycopg prepares a statement only when asked (prepare=True) or after this many executions;
# Django sets no threshold (None: never prepare), which would also ignore prepare=True.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def execute_prepared(
    connection: BaseDatabaseWrapper, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``execute()`` through a server-side prepared statement, parsed once per connection and
    then only bound and run. For statements whose plan cannot go stale, i.e. enqueue's INSERTs:
    a statement that reads ``pgjobs_job`` through a choice of plans goes through
    ``execute_prepared_replanned()`` or is not prepared (docs/explanation/claim.md).

    It runs on a plain psycopg cursor of the Django connection's own psycopg connection, so it
    joins whatever transaction Django has open (``transaction.atomic`` included) and Django's
    bookkeeping stays intact: errors go through ``wrap_database_errors`` (Django exception types,
    ``errors_occurred`` set), a broken atomic block refuses it as Django's cursor would. Falls back
    to ``execute()`` when Django is recording queries (``DEBUG``, ``assertNumQueries``) so they
    stay visible, and when ``PGJOBS["PREPARED_STATEMENTS"]`` is off (PgBouncer < 1.21 in
    transaction mode).
    """
    if connection.queries_logged or not get_config().PREPARED_STATEMENTS:
        return execute(connection, name, params)
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    raw = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
    with (
        _missing_tables_named(connection),
        connection.wrap_database_errors,
        psycopg.Cursor(raw) as cursor,
    ):
        cursor.execute(query(name), params or {}, prepare=True)
        return _rows(cursor)


#: psycopg connections whose session plans every prepared statement at each run (see below).
_replanning_sessions: weakref.WeakSet = weakref.WeakSet()


def execute_prepared_replanned(
    connection: BaseDatabaseWrapper, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``execute_prepared()`` for a statement whose plan would go stale: the worker's claim.
    Parsed once per connection, and planned at every run with the values of that run, as an
    unprepared statement is: the session's ``plan_cache_mode`` is set to ``force_custom_plan``
    (once per connection), so PostgreSQL never switches it to a generic plan
    (docs/explanation/claim.md).

    Only for a connection that keeps its session from one statement to the next: behind
    PgBouncer in transaction mode the setting would stay on one server connection and the
    statement could run on another. The worker asks for it only when it listens, which needs
    such a session too.
    """
    if connection.queries_logged or not get_config().PREPARED_STATEMENTS:
        return execute(connection, name, params)
    connection.ensure_connection()
    raw = connection.connection
    if raw not in _replanning_sessions:
        with connection.wrap_database_errors:
            raw.execute("SET plan_cache_mode = force_custom_plan")
        _replanning_sessions.add(raw)
    return execute_prepared(connection, name, params)


def ids_of(rows: Sequence[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def as_django_reads(moment: datetime | None) -> datetime | None:
    """A time from a raw statement as Django reads a ``DateTimeField``: aware, or naive in the
    project's time zone when ``USE_TZ = False``."""
    if moment is None or moment.tzinfo is None or settings.USE_TZ:
        return moment
    return timezone.make_naive(moment)
