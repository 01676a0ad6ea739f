"""``path("pgjobs/", include("django_pgjobs.urls"))`` serves ``pgjobs/metrics`` (Prometheus)
and ``pgjobs/health``; docs/howto/monitor.md."""

from django.urls import path

from . import views

app_name = "pgjobs"

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("health", views.health, name="health"),
]
