"""Django settings of the django-tasks-db driver (database from BENCH_DATABASE_URL)."""

import os

from testproject.settings import database_from_url

SECRET_KEY = "bench"
USE_TZ = True
try:
    import django.tasks  # noqa: F401 - Django 6 has the tasks framework built in

    INSTALLED_APPS = ["django.contrib.contenttypes", "django_tasks_db"]
except ImportError:
    INSTALLED_APPS = ["django.contrib.contenttypes", "django_tasks", "django_tasks_db"]
DATABASES = {"default": database_from_url(os.environ["BENCH_DATABASE_URL"])}
DATABASES["default"]["CONN_MAX_AGE"] = None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {"version": 1, "loggers": {"django_tasks": {"level": "WARNING"}}}
