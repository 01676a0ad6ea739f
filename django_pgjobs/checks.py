"""System checks. IDs are stable and listed in docs/reference/checks.md.

- ``pgjobs.E001``: the jobs database is not PostgreSQL.
- ``pgjobs.E002``: ``settings.PGJOBS`` has an unknown key or a bad value.
- ``pgjobs.E003``: ``PGJOBS["DATABASE"]`` names no database in ``settings.DATABASES``.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import connections

from .conf import ConfigError, raw_settings, validate


def _alias() -> str | None:
    try:
        raw = raw_settings()
    except ConfigError:
        return None
    alias = raw.get("DATABASE", "default")
    return alias if isinstance(alias, str) else None


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    try:
        problems = validate(raw_settings())
    except ConfigError as error:
        problems = [str(error)]
    return [
        Error(
            f"settings.PGJOBS: {problem}",
            hint="See docs/reference/settings.md for every key and its default.",
            id="pgjobs.E002",
        )
        for problem in problems
    ]


@register(Tags.compatibility)
def check_database(app_configs=None, **kwargs):
    alias = _alias()
    if alias is None:
        return []
    if alias not in settings.DATABASES:
        return [
            Error(
                f"PGJOBS['DATABASE'] is {alias!r}, which is not in settings.DATABASES.",
                hint=f"Use one of: {', '.join(settings.DATABASES) or '(none)'}.",
                id="pgjobs.E003",
            )
        ]
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return [
            Error(
                f"django-pgjobs needs PostgreSQL, but the database {alias!r} uses "
                f"{settings.DATABASES[alias].get('ENGINE')!r}.",
                hint="Point PGJOBS['DATABASE'] at a database using "
                "'django.db.backends.postgresql' (PostgreSQL 13 or newer).",
                id="pgjobs.E001",
            )
        ]
    return []
