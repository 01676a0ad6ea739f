"""The database router of docs/howto/databases.md: the jobs tables on every database that
holds queues, the project's own tables on "default" alone."""

from __future__ import annotations

#: The databases that hold jobs and nothing else (PGJOBS["QUEUE_DATABASES"] names them).
JOBS_ONLY = {"jobs2"}


class JobsRouter:
    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if db in JOBS_ONLY:
            return app_label == "django_pgjobs"
        return None  # the other databases: as without this router
