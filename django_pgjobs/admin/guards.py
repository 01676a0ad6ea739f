"""The gates of the admin's own views: changes by POST with the permission, pages with the view
permission, a ``next`` that stays on this site."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.utils.http import url_has_allowed_host_and_scheme


def refuse_mutation(model_admin, request: HttpRequest, permission: str) -> HttpResponse | None:
    """Gate of every view that changes rows: a response for anything but POST (CSRF is checked
    by the middleware), ``PermissionDenied`` (403) without ``has_<permission>_permission``,
    None when the change may go ahead. Views are also wrapped in ``admin_site.admin_view``, which
    sends anonymous users to the login page."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not getattr(model_admin, f"has_{permission}_permission")(request):
        raise PermissionDenied
    return None


def require_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> None:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied


def safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default
