"""System checks. IDs are stable and listed in docs/reference/checks.md.

- ``pgjobs.E001``: the jobs database is not PostgreSQL.
- ``pgjobs.E002``: ``settings.PGJOBS`` has an unknown key or a bad value.
- ``pgjobs.E003``: ``PGJOBS["DATABASE"]`` (or a database of ``PGJOBS["QUEUE_DATABASES"]``)
  names no database in ``settings.DATABASES``.
- ``pgjobs.E004``: a job's ``lease_seconds`` is shorter than two heartbeats.
- ``pgjobs.E005``: ``PGJOBS["OUTBOX_PUBLISHER"]`` names a publisher that cannot be built.
- ``pgjobs.E006``: immediate mode is on with ``DEBUG`` off and no explicit opt-in.
- ``pgjobs.E007``: a recurring job's queue lives on another database than the schedules.
- ``pgjobs.W001``: atomic jobs run on a jobs database other than ``default``.
- ``pgjobs.W002``: a schedule names a job that is not registered (a database check: run by
  ``migrate`` and ``check --database``).
- ``pgjobs.W003``: a schedule declared in code whose job no longer declares ``cron=`` (a
  database check too).
- ``pgjobs.W004``: a schedule whose arguments do not fit its job (a database check too).
- ``pgjobs.W005``: a job's payload versions below its ``version`` lack an upgrade step.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections

from .conf import ConfigError, get_config, queue_database, raw_settings, validate
from .outbox.publishers import publisher_problem
from .registry import registered
from .schedules import elsewhere, unfit
from .versions import skipped_versions


def _aliases() -> list[tuple[str, str]]:
    """Each alias the settings name for jobs, with the setting that names it."""
    try:
        raw = raw_settings()
    except ConfigError:
        return []
    alias = raw.get("DATABASE", "default")
    named = [("PGJOBS['DATABASE']", alias)] if isinstance(alias, str) else []
    routes = raw.get("QUEUE_DATABASES") or {}
    if isinstance(routes, dict):
        named += [
            (f"PGJOBS['QUEUE_DATABASES'][{queue!r}]", alias)
            for queue, alias in routes.items()
            if isinstance(alias, str) and alias
        ]
    return named


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
    errors, seen = [], set()
    for name, alias in _aliases():
        if alias not in settings.DATABASES:
            errors.append(
                Error(
                    f"{name} is {alias!r}, which is not in settings.DATABASES.",
                    hint=f"Use one of: {', '.join(settings.DATABASES) or '(none)'}.",
                    id="pgjobs.E003",
                )
            )
        elif alias not in seen and connections[alias].vendor != "postgresql":
            errors.append(
                Error(
                    f"django-pgjobs needs PostgreSQL, but the database {alias!r} uses "
                    f"{settings.DATABASES[alias].get('ENGINE')!r}.",
                    hint=f"Point {name} at a database using "
                    "'django.db.backends.postgresql' (PostgreSQL 13 or newer).",
                    id="pgjobs.E001",
                )
            )
        seen.add(alias)
    return errors


@register(Tags.compatibility)
def check_recurring_jobs_database(app_configs=None, **kwargs):
    """Schedules fire on ``PGJOBS["DATABASE"]``: a recurring job whose queue lives on another
    database would never fire (``schedules.elsewhere``)."""
    try:
        get_config()
    except ConfigError:
        return []  # pgjobs.E002 says why
    return [
        Error(
            f"Job {definition.name!r} declares cron= but {problem}: it would never fire.",
            hint="Give it a queue of PGJOBS['DATABASE'], or have a job there enqueue it.",
            obj=definition.func,
            id="pgjobs.E007",
        )
        for definition in registered().values()
        if definition.cron is not None and (problem := elsewhere(definition)) is not None
    ]


@register(Tags.compatibility)
def check_job_leases(app_configs=None, **kwargs):
    """A lease is extended once per heartbeat; one shorter than two heartbeats expires between
    them, and the job is rescued (run again) while its worker is still running it."""
    try:
        heartbeat = get_config().HEARTBEAT_SECONDS
    except ConfigError:
        return []  # reported by pgjobs.E002
    return [
        Error(
            f"Job {definition.name!r} has lease_seconds={definition.lease_seconds:g}, shorter than "
            f"two heartbeats (PGJOBS['HEARTBEAT_SECONDS'] = {heartbeat:g}): its lease would "
            "expire between heartbeats and the job would run again while still running.",
            hint=f"Give it lease_seconds >= {2 * heartbeat:g}, or lower HEARTBEAT_SECONDS.",
            obj=definition.func,
            id="pgjobs.E004",
        )
        for definition in registered().values()
        if definition.lease_seconds is not None and definition.lease_seconds < 2 * heartbeat
    ]


@register(Tags.compatibility)
def check_outbox_publisher(app_configs=None, **kwargs):
    try:
        setting = get_config().OUTBOX_PUBLISHER
    except ConfigError:
        return []  # pgjobs.E002 says why
    problem = publisher_problem(setting) if setting else None
    if problem is None:
        return []
    return [
        Error(
            f"PGJOBS['OUTBOX_PUBLISHER'] cannot be used: {problem}",
            hint="A broker URL (amqp://..., nats://...) or the dotted path of a publisher or "
            "of a callable; see docs/howto/outbox.md.",
            id="pgjobs.E005",
        )
    ]


@register(Tags.compatibility)
def check_atomic_jobs_database(app_configs=None, **kwargs):
    """An atomic job's transaction is on the jobs database only: with ``PGJOBS["DATABASE"]``
    elsewhere, what the job writes through ``default`` (every model not routed there) commits
    as it goes and stays when the job fails."""
    try:
        config = get_config()
    except ConfigError:
        return []  # reported by pgjobs.E002
    if config.DATABASE == "default":
        return _atomic_jobs_on_routed_queues()
    atomic = sorted(name for name, definition in registered().items() if definition.is_atomic())
    if not atomic and not config.DEFAULT_ATOMIC:
        return []
    which = (
        "PGJOBS['DEFAULT_ATOMIC'] is True"
        if config.DEFAULT_ATOMIC
        else f"{len(atomic)} job(s) use atomic=True ({', '.join(atomic[:3])}"
        + (", ..." if len(atomic) > 3 else "")
        + ")"
    )
    return [
        Warning(
            f"{which}, but PGJOBS['DATABASE'] is {config.DATABASE!r}: an atomic job's "
            f"transaction is on {config.DATABASE!r} only, so its writes to other databases "
            "(such as 'default') are not rolled back when it fails.",
            hint="Keep the jobs tables on 'default' for atomic jobs, or make those jobs write "
            f"only to {config.DATABASE!r} (and be idempotent about the rest).",
            id="pgjobs.W001",
        )
    ]


def _atomic_jobs_on_routed_queues() -> list[Warning]:
    """``pgjobs.W001`` for the atomic jobs whose queue lives on another database than
    'default' (``PGJOBS["QUEUE_DATABASES"]``): their transaction is on that database."""
    routed = sorted(
        name
        for name, definition in registered().items()
        if definition.is_atomic() and queue_database(definition.get_queue()) != "default"
    )
    if not routed:
        return []
    return [
        Warning(
            f"{len(routed)} atomic job(s) ({', '.join(routed[:3])}"
            + (", ..." if len(routed) > 3 else "")
            + ") have their queue on another database than 'default' (PGJOBS['QUEUE_DATABASES'])"
            ": an atomic job's transaction is on its queue's database only, so its writes to "
            "'default' are not rolled back when it fails.",
            hint="Give them a queue on 'default', or make them write only to their queue's "
            "database (and be idempotent about the rest).",
            id="pgjobs.W001",
        )
    ]


@register(Tags.database)
def check_schedules(app_configs=None, databases=None, **kwargs):
    """A schedule whose job is no longer registered fires nothing; it is kept (never dropped)
    and said here and in the admin, for the operator to fix or delete."""
    named = _aliases()
    alias = named[0][1] if named and named[0][0] == "PGJOBS['DATABASE']" else None
    if not databases or alias not in databases:
        return []
    from .models import Schedule

    try:
        rows = list(
            Schedule.objects.using(alias).values_list(
                "name", "job_name", "source", "args", "kwargs"
            )
        )
    except DatabaseError:
        return []  # not migrated yet
    known = registered()
    return (
        [
            Warning(
                f"Schedule {name!r} names the job {job_name!r}, which is not registered: it "
                "fires nothing.",
                hint="Register the job again (@job in an installed app's jobs module or "
                "PGJOBS['JOB_MODULES']), point the schedule at another job in the admin, or "
                "delete it.",
                obj=f"schedule {name}",
                id="pgjobs.W002",
            )
            for name, job_name, *_ in rows
            if job_name not in known
        ]
        + [
            Warning(
                f"Schedule {name!r} has arguments that do not fit the job {job_name!r} ({problem}): "
                "it fires nothing.",
                hint="Change the schedule's arguments in the admin (or the job's cron= args).",
                obj=f"schedule {name}",
                id="pgjobs.W004",
            )
            for name, job_name, _, args, kwargs in rows
            if job_name in known and (problem := unfit(known[job_name], args, kwargs))
        ]
        + [
            Warning(
                f"Schedule {name!r} was declared in code, but the job {job_name!r} no longer "
                "declares cron=: it fires nothing.",
                hint="Delete the schedule in the admin, or give the job its cron= again.",
                obj=f"schedule {name}",
                id="pgjobs.W003",
            )
            for name, job_name, source, *_ in rows
            if source == "code" and job_name in known and known[job_name].cron is None
        ]
    )


@register(Tags.compatibility)
def check_job_versions(app_configs=None, **kwargs):
    """``@job(version=N, upgrade={...})`` with a version below N and no step from it: rows still
    of that version cannot be upgraded and are dead-lettered (``versions``)."""
    problems = []
    for name, definition in sorted(registered().items()):
        skipped = skipped_versions(definition.version, definition.upgrade)
        if skipped:
            problems.append(
                Warning(
                    f"Job {name!r} is version {definition.version} but upgrade has no step from "
                    f"version{'s' if len(skipped) > 1 else ''} "
                    f"{', '.join(map(str, skipped))}: jobs enqueued with "
                    f"{'them' if len(skipped) > 1 else 'it'} will be dead-lettered "
                    "(NoUpgradePath) instead of run.",
                    hint="Add the missing steps to @job(upgrade={...}), or silence this check "
                    "once no such job is left (in pgjobs_job or in the dead letters).",
                    id="pgjobs.W005",
                )
            )
    return problems


@register(Tags.compatibility)
def check_immediate_mode(app_configs=None, **kwargs):
    """Immediate mode runs every job in the process that enqueued it (a web request's): fine on
    a developer's machine, an outage in production. ``DEBUG`` off looks like production."""
    try:
        config = get_config()
    except ConfigError:
        return []  # reported by pgjobs.E002
    if not config.IMMEDIATE or settings.DEBUG or config.IMMEDIATE_WITHOUT_DEBUG:
        return []
    return [
        Error(
            "PGJOBS['IMMEDIATE'] is True with DEBUG off: every job would run inside the process "
            "that enqueued it (a web request), not in a worker.",
            hint="Turn IMMEDIATE off in production settings. For a test settings module, where "
            "the test runner turns DEBUG off, also set PGJOBS['IMMEDIATE_WITHOUT_DEBUG'] = True.",
            id="pgjobs.E006",
        )
    ]
