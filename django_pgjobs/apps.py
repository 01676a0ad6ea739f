from django.apps import AppConfig


class PgJobsConfig(AppConfig):
    name = "django_pgjobs"
    label = "django_pgjobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks, immediate its receiver of job_enqueued
        from . import checks, immediate, taskframework  # noqa: F401
        from .registry import autodiscover

        autodiscover()
        if taskframework.AVAILABLE:
            from .backend import discover_task_modules

            discover_task_modules()  # task rows run only tasks of modules imported by now
