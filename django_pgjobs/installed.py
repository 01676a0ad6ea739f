"""The check that ``django_pgjobs`` is in ``INSTALLED_APPS`` before a job is declared or enqueued.

Without the app its tables, its system checks and the discovery of job modules are all missing,
and the first enqueue would fail deep in Django ("Model class ... isn't in an application in
INSTALLED_APPS"). ``@job`` checks once the app registry is ready (a job module imported by a URL
conf or a view: ``manage.py check`` then fails with this message), and every enqueue checks.
"""

from __future__ import annotations

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

FIX = (
    'django_pgjobs is not in INSTALLED_APPS: add "django_pgjobs" to INSTALLED_APPS and run '
    "`python manage.py migrate` (docs/quickstart.md)"
)


#: The app registry's ``app_configs`` last found to hold the app: every enqueue checks, and
#: looking the app up walks every installed app. ``override_settings(INSTALLED_APPS=...)``
#: gives the registry a new dict, so a changed list is looked at again.
_found_in: object = None


def require_installed(what: str) -> None:
    """``ImproperlyConfigured`` naming the fix when the app registry is ready without the app;
    ``what``: the job or call that needs it."""
    global _found_in
    if not apps.ready:
        return
    configs = apps.app_configs
    if configs is _found_in:
        return
    if not apps.is_installed("django_pgjobs"):
        raise ImproperlyConfigured(f"{FIX}; needed by {what}")
    _found_in = configs
