"""Running named statements on a Django connection and turning rows into values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import ProgrammingError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .conf import get_config
from .sql import query


class JobsTableMissing(RuntimeError):
    """The django_pgjobs tables do not exist yet: ``manage.py migrate`` has not run."""


JSON_COLUMNS = frozenset({"args", "kwargs", "errors", "queues"})


def jobs_connection(using: str | None = None) -> BaseDatabaseWrapper:
    return connections[using or get_config().DATABASE]


def _decode(name: str, value: Any) -> Any:
    if name in JSON_COLUMNS and isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


def execute(
    connection: BaseDatabaseWrapper, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run the statement ``name`` with ``params``; return the rows as dicts (JSON decoded)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(query(name), params or {})
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [
                {n: _decode(n, v) for n, v in zip(names, row, strict=True)}
                for row in cursor.fetchall()
            ]
    except ProgrammingError as error:
        if getattr(getattr(error, "__cause__", None), "sqlstate", None) == "42P01":
            raise JobsTableMissing(
                "The django_pgjobs tables do not exist in the database "
                f"{connection.alias!r}: run `python manage.py migrate` first."
            ) from error
        raise


def ids_of(rows: Sequence[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]
