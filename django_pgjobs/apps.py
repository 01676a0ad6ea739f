from django.apps import AppConfig


class PgJobsConfig(AppConfig):
    name = "django_pgjobs"
    label = "django_pgjobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .registry import autodiscover

        autodiscover()
