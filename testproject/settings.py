"""Settings of the demo project the tests run against.

The database comes from ``DATABASE_URL``; without it a private throwaway PostgreSQL server is
started (testproject/throwaway_pg.py) and shared with every child process.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import django

from testproject import throwaway_pg

BASE_DIR = Path(__file__).resolve().parent


def database_from_url(url: str) -> dict:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a postgresql:// URL, not {parts.scheme}://")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": query.pop("host", parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": query,
        "CONN_MAX_AGE": 0,
        "TEST": {"NAME": os.environ.get("PGJOBS_TEST_DATABASE_NAME") or None},
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "testproject-insecure-key-for-local-use-only")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgjobs",
    "testproject.demo",
    # the examples of docs/howto: its tasks module (testproject/handlers/tasks.py) is imported
    # at start-up, as every installed app's is, so task rows may run its tasks
    "testproject.handlers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin in the language the browser asks for (Accept-Language), among LANGUAGES: the
    # pgjobs pages ship a German catalogue (docs/reference/admin.md, "Languages").
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(throwaway_pg.database_url())}
# Tests of connection handling between jobs run workers with persistent connections ("none") or
# health checks; Django's defaults otherwise.
if os.environ.get("PGJOBS_TEST_CONN_MAX_AGE"):
    _max_age = os.environ["PGJOBS_TEST_CONN_MAX_AGE"]
    DATABASES["default"]["CONN_MAX_AGE"] = None if _max_age == "none" else int(_max_age)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = os.environ.get("PGJOBS_TEST_CONN_HEALTH_CHECKS") == "1"
# PGJOBS_TEST_JOBS_ALIAS: a second alias on the same database holding the jobs (what a project
# with PGJOBS["DATABASE"] elsewhere does), for the tests of that setup.
JOBS_ALIAS = os.environ.get("PGJOBS_TEST_JOBS_ALIAS", "default")
if JOBS_ALIAS != "default":
    DATABASES[JOBS_ALIAS] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

# A second jobs database (docs/howto/databases.md): the tests of queues on two databases
# (tests/test_databases.py) route the queue "heavy" there. Its test database is created only
# for the tests that list it in their ``databases``, with the jobs tables alone.
DATABASES["jobs2"] = {
    **DATABASES["default"],
    "NAME": os.environ.get("PGJOBS_TEST_JOBS2_DATABASE") or f"{DATABASES['default']['NAME']}_jobs2",
    "TEST": {"NAME": None},
}
DATABASE_ROUTERS = ["testproject.routers.JobsRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The tests of projects without time zone support run with DJANGO_USE_TZ=0 (and another zone).
USE_TZ = os.environ.get("DJANGO_USE_TZ", "1") == "1"
TIME_ZONE = os.environ.get("DJANGO_TIME_ZONE", "UTC")
STATIC_URL = "static/"
# English by default; German when the browser asks for it (LocaleMiddleware above).
LANGUAGE_CODE = "en-us"
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
# The jobs of the demo and of the how-to examples send mail: kept in memory, never sent.
# (Django 6.1 configures mail with MAILERS and deprecates EMAIL_BACKEND.)
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

PGJOBS = {
    "DATABASE": JOBS_ALIAS,
    # "heavy=jobs2": the queues on a second database, for the worker processes of the tests
    # that route them (tests/test_databases.py); the others run with every queue on one.
    "QUEUE_DATABASES": dict(
        pair.split("=", 1) for pair in os.environ.get("PGJOBS_TEST_QUEUE_DATABASES", "").split()
    ),
    # Short leases so the crash tests see rescues within seconds; production keeps the defaults.
    "LEASE_SECONDS": float(os.environ.get("PGJOBS_LEASE_SECONDS", "60")),
    "HEARTBEAT_SECONDS": float(os.environ.get("PGJOBS_HEARTBEAT_SECONDS", "10")),
    "RESCUE_INTERVAL_SECONDS": float(os.environ.get("PGJOBS_RESCUE_INTERVAL_SECONDS", "15")),
    # The worker's own vacuum of the jobs table (tests/test_worker_vacuum.py shortens it).
    "VACUUM_INTERVAL_SECONDS": float(os.environ.get("PGJOBS_VACUUM_INTERVAL_SECONDS", "10")),
    "REDACT_KEYS": ["password", "token"],
    "MAX_STUCK_THREADS": int(os.environ.get("PGJOBS_MAX_STUCK_THREADS", "4")),
    # Forged and unknown rows dead-lettered at once, as the security tests expect; the default
    # (600 s) and the rolling deploys it serves: tests/test_rolling_deploys.py.
    "UNKNOWN_JOB_GRACE_SECONDS": float(os.environ.get("PGJOBS_UNKNOWN_JOB_GRACE_SECONDS", "0")),
    "RELEASE": os.environ.get("PGJOBS_TEST_RELEASE", ""),
    # The outbox's relay (tests/test_outbox*.py): runjobs relays only when a test names a broker;
    # short leases and waits so a killed relay's events come back within seconds.
    "OUTBOX_PUBLISHER": os.environ.get("PGJOBS_OUTBOX_PUBLISHER", ""),
    "OUTBOX_LEASE_SECONDS": float(os.environ.get("PGJOBS_OUTBOX_LEASE_SECONDS", "60")),
    "OUTBOX_POLL_SECONDS": float(os.environ.get("PGJOBS_OUTBOX_POLL_SECONDS", "0.2")),
    "OUTBOX_RETRY_CAP_SECONDS": float(os.environ.get("PGJOBS_OUTBOX_RETRY_CAP_SECONDS", "2")),
    # The examples of docs/howto/handlers.md, one module per section.
    "JOB_MODULES": [
        "testproject.handlers.basics",
        "testproject.handlers.async_jobs",
        "testproject.handlers.timeouts",
        "testproject.handlers.results",
        "testproject.handlers.retries",
        "testproject.handlers.aborting",
        # and of docs/howto/repair.md
        "testproject.handlers.versions",
        # and of docs/howto/from-celery.md
        "testproject.handlers.from_celery",
        # and of docs/howto/unique.md
        "testproject.handlers.unique",
        # and of docs/howto/developing.md
        "testproject.handlers.developing",
        # and of docs/howto/workflows.md
        "testproject.handlers.workflows",
        # and of docs/howto/flow-control.md
        "testproject.handlers.flow",
        # and of docs/howto/databases.md
        "testproject.handlers.databases",
        # tests of start-up imports add their own (tests/test_task_imports.py)
        *os.environ.get("PGJOBS_TEST_JOB_MODULES", "").split(),
    ],
}

# Retention for the tests run as processes (tests/test_repair_command.py): successful jobs kept
# to read their start times, dead letters pruned by `manage.py pgjobs prune`. None by default.
for _setting in ("KEEP_SUCCEEDED_SECONDS", "DEAD_LETTER_MAX_AGE_SECONDS"):
    if os.environ.get("PGJOBS_" + _setting):
        PGJOBS[_setting] = float(os.environ["PGJOBS_" + _setting])
if os.environ.get("PGJOBS_DEAD_LETTER_MAX_PER_NAME"):
    PGJOBS["DEAD_LETTER_MAX_PER_NAME"] = int(os.environ["PGJOBS_DEAD_LETTER_MAX_PER_NAME"])

# The tests run behind PgBouncer in transaction mode (tests/pgbouncer_support.py) use the
# settings docs/howto/deploy.md#pgbouncer gives for it (PgBouncer before 1.21).
if os.environ.get("PGJOBS_TEST_PGBOUNCER") == "1":
    PGJOBS["LISTEN_NOTIFY"] = False
    PGJOBS["PREPARED_STATEMENTS"] = False

# django.tasks (Django 6, or the django-tasks backport on Django 5.2) runs on the job queue:
# docs/howto/django-tasks.md. Quick retries, so the tests see a failing task's attempts.
TASKS = {
    "default": {
        "BACKEND": "django_pgjobs.backend.PgJobsBackend",
        "QUEUES": ["default", "tasks"],
        "OPTIONS": {
            "MAX_ATTEMPTS": 3,
            "RETRY": {"base_seconds": 0.1, "factor": 1, "jitter": 0},
        },
    },
    # the same tables and workers; each task runs in one transaction with its completion
    "atomic": {
        "BACKEND": "django_pgjobs.backend.PgJobsBackend",
        "QUEUES": ["tasks"],
        "OPTIONS": {
            "ATOMIC": True,
            "RETRY": {"base_seconds": 0.1, "factor": 1, "jitter": 0},
        },
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_pgjobs": {"handlers": ["console"], "level": "INFO"},
        # the django-tasks backport's logger (Django 6's "django.tasks" goes to "django")
        "django_tasks": {"handlers": ["console"], "level": "INFO"},
    },
}

# tests/test_reload.py: the autoreloader's "File ... first seen" line for one file, so that the
# test edits that file only once the reloader has its first modification time (an edit before
# the reloader's first look is never seen as a change).
if os.environ.get("PGJOBS_TEST_RELOAD_WATCH"):
    _watched = os.environ["PGJOBS_TEST_RELOAD_WATCH"]
    LOGGING["filters"] = {
        "watched": {
            "()": "django.utils.log.CallbackFilter",
            "callback": lambda record: _watched in record.getMessage(),
        }
    }
    LOGGING["handlers"]["watched"] = {
        "class": "logging.StreamHandler",
        "formatter": "plain",
        "filters": ["watched"],
    }
    LOGGING["loggers"]["django.utils.autoreload"] = {
        "handlers": ["watched"],
        "level": "DEBUG",
        "propagate": False,
    }
