"""Django settings of the django-pgjobs driver (database from BENCH_DATABASE_URL)."""

import os

from testproject.settings import database_from_url

SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_pgjobs"]
DATABASES = {"default": database_from_url(os.environ["BENCH_DATABASE_URL"])}
DATABASES["default"]["CONN_MAX_AGE"] = None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PGJOBS = {
    "JOB_MODULES": ["bench.pgjobs_jobs"],
    "LISTEN_NOTIFY": os.environ.get("BENCH_NOTIFY", "1") == "1",
    "PREPARED_STATEMENTS": os.environ.get("BENCH_PREPARED", "1") == "1",
}
LOGGING = {"version": 1, "loggers": {"django_pgjobs": {"level": "WARNING"}}}
