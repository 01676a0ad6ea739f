from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PgJobsConfig(AppConfig):
    name = "django_pgjobs"
    label = "django_pgjobs"
    verbose_name = _("Jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, immediate, taskframework  # noqa: F401  (checks registers the checks)
        from .registry import autodiscover

        autodiscover()
        immediate.listen_if_enabled()
        if taskframework.AVAILABLE:
            from .backend import discover_task_modules

            discover_task_modules()  # task rows run only tasks of modules imported by now
