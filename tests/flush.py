"""Emptying the database after a transactional test, quicker than Django's ``flush``.

After each ``transaction=True`` test (three quarters of the suite) Django's ``TransactionTestCase``
runs ``flush``: one ``TRUNCATE`` of every table (17 here, each given new files), then the
``post_migrate`` signal, which creates the content types and permissions again. Most tests wrote
to two or three tables, and the content types and permissions are the same rows each time.

``empty_the_tables_written_to`` ends a test with the same empty tables: it truncates the tables
that hold rows (one statement that finds them, one ``TRUNCATE ... CASCADE``), leaving the
content types and permissions as the last full flush made them. When those two tables differ
from what that flush left (a test changed them), or the test case asks for what only Django's
flush does (``available_apps``, ``serialized_rollback``, ``reset_sequences``), Django's flush
runs as before.
"""

from __future__ import annotations

from django.core.management import call_command
from django.db import connections
from django.test import TransactionTestCase

# Created again by ``post_migrate`` after every full flush: left alone while unchanged.
KEPT = ("django_content_type", "auth_permission")

django_fixture_teardown = TransactionTestCase._fixture_teardown
# What the kept tables held after the last full flush, by database alias.
kept_state: dict[str, tuple] = {}


def signature(cursor) -> tuple:
    """Row count and highest id of each kept table: what a test that changed them changes."""
    parts = [f"SELECT count(*), max(id) FROM {table}" for table in KEPT]
    cursor.execute(" UNION ALL ".join(f"({part})" for part in parts))
    return tuple(cursor.fetchall())


def empty_the_tables_written_to(case: TransactionTestCase) -> None:
    if case.available_apps is not None or case.serialized_rollback or case.reset_sequences:
        django_fixture_teardown(case)
        return
    for alias in case._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        # a database holding the jobs tables alone (testproject/routers.py) keeps nothing
        keeps = all(table in tables for table in KEPT)
        with connection.cursor() as cursor:
            if keeps and kept_state.get(alias) != signature(cursor):
                call_django_flush(alias)
                kept_state[alias] = signature(cursor)
                continue
            quote = connection.ops.quote_name
            written = [table for table in tables if table not in KEPT]
            cursor.execute(
                " UNION ALL ".join(
                    f"SELECT {index} WHERE EXISTS (SELECT FROM {quote(table)})"
                    for index, table in enumerate(written)
                )
            )
            names = [quote(written[index]) for (index,) in cursor.fetchall()]
            if names:
                # CASCADE: the empty tables that refer to these (TRUNCATE needs them named too)
                cursor.execute(f"TRUNCATE {', '.join(names)} CASCADE")


def call_django_flush(alias: str) -> None:
    """What Django's teardown runs on each database: ``flush``, then ``post_migrate``."""
    call_command(
        "flush",
        verbosity=0,
        interactive=False,
        database=alias,
        reset_sequences=False,
        allow_cascade=False,
        inhibit_post_migrate=False,
    )


def install() -> None:
    TransactionTestCase._fixture_teardown = empty_the_tables_written_to
