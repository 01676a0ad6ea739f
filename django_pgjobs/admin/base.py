"""What every pgjobs ModelAdmin shares: read-only rows, operator permissions, bounded paging.

Rows are never edited through forms: every change an operator makes is an action that runs one
function of ``django_pgjobs.operations`` (the same code the worker uses). Actions map onto the
model permissions Django already creates:

- ``view_<model>``: see the pages;
- ``change_<model>``: run now / retry now (jobs), requeue (dead letters), pause/resume (queues);
- ``delete_<model>``: cancel (jobs), delete (dead letters).
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.contrib.admin.views.main import IGNORED_PARAMS, ORDER_VAR, ChangeList
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.core.paginator import Paginator
from django.db.models import JSONField, Q
from django.db.models.constants import LOOKUP_SEP
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import db, operations
from ..conf import get_config
from ..overview import COUNT_CAP
from . import confirm, databases, display, values
from .guards import refuse_mutation, require_view, safe_next  # noqa: F401 (their home before)

#: Largest number of rows one bulk action touches ("select all" on a huge filter included); the
#: same as the count cap, so "Select all 10000" does what it says.
BULK_LIMIT = COUNT_CAP


class CappedPaginator(Paginator):
    """Counts with ``SELECT count(*) FROM (... LIMIT COUNT_CAP + 1)``: a page costs the same on a
    table of a thousand rows or of ten million. Pages past the cap are not offered."""

    cap = COUNT_CAP

    @cached_property
    def rows_to_cap(self) -> int:
        """Matching rows, counted up to ``cap + 1`` (one past the cap tells "more")."""
        return self.object_list[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self.rows_to_cap, self.cap)

    @property
    def capped(self) -> bool:
        return self.rows_to_cap > self.cap


class ValueFilter(admin.SimpleListFilter):
    """Exact match on one column; ``values_from(connection)`` lists the values (a named statement
    with a loose index scan, so the filter costs one probe per distinct value)."""

    field = ""
    values_from = None

    def lookups(self, request, model_admin):
        return [
            (value, value or _("(none)")) for value in self.values_from(model_admin.connection())
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if "\x00" in value:  # PostgreSQL refuses NUL in text, so no row holds one
            return queryset.none()
        return queryset.filter(**{self.field: value})


class QueueFilter(ValueFilter):
    title = gettext_lazy("queue")
    parameter_name = field = "queue"
    values_from = staticmethod(operations.queue_names)


class CappedChangeList(ChangeList):
    """A ChangeList whose ``result_count`` stops at ``COUNT_CAP``; ``count_capped`` tells the
    templates to say "10,000+".

    A lookup in the query string holding a NUL character (``?queue__exact=%00``) matches no row:
    PostgreSQL text cannot hold NUL, and sending it fails the query (a 500). Such lookups are
    left out of the query, the list is shown empty with an error message.
    """

    def __init__(self, request, *args, **kwargs):
        self.nul_lookups = sorted(
            key
            for key, values in request.GET.lists()
            if key not in IGNORED_PARAMS and any("\x00" in text for text in (key, *values))
        )
        super().__init__(request, *args, **kwargs)
        if self.nul_lookups:
            names = ", ".join(repr(key) for key in self.nul_lookups)  # NUL shown as \x00
            messages.error(
                request,
                _(
                    "No rows match %(names)s: the value contains a NUL character, which "
                    "PostgreSQL text cannot hold."
                )
                % {"names": names},
            )

    def get_ordering(self, request, queryset):
        """The view's own order: a hand-written ``?o=`` is not obeyed (sortable_by only
        hides the links)."""
        self.params.pop(ORDER_VAR, None)
        return super().get_ordering(request, queryset)

    def get_filters_params(self, params=None):
        lookups = super().get_filters_params(params)
        for key in self.nul_lookups:
            lookups.pop(key, None)
        lookups.pop(databases.PARAM, None)  # the page's database, not a lookup
        return lookups

    def url_for_result(self, result) -> str:
        """A row's page, on the database of this list."""
        return super().url_for_result(result) + databases.url_query()

    def get_queryset(self, request, exclude_parameters=None):
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.none() if self.nul_lookups else queryset

    def get_results(self, request):
        super().get_results(request)
        self.count_capped = self.paginator.capped
        self.multi_page = self.result_count > self.list_per_page
        self.can_show_all = self.result_count <= self.list_max_show_all and not self.count_capped


BIGINT_MAX = 2**63 - 1


def row_id(text: object) -> int | None:
    """``text`` (``123`` or ``#123``, from a URL or the search box) as a row id, or None.

    Only ASCII digits within bigint: ``"²".isdigit()`` is true but ``int("²")`` fails, and a
    number past bigint fails in PostgreSQL.
    """
    number = str(text).strip().removeprefix("#")
    if not (number.isascii() and number.isdigit()) or int(number) > BIGINT_MAX:
        return None
    return int(number)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    return f"{count:,} {singular if count == 1 else (plural_form or singular + 's')}"


class OperatorAdmin(admin.ModelAdmin):
    """Read-only ModelAdmin whose changes are operator actions (see the module docstring)."""

    paginator = CappedPaginator
    show_full_result_count = False
    list_per_page = 50
    list_max_show_all = 200
    sortable_by = ()  # sorting 1,000,000 rows by any column is not free; order is per view
    show_facets = admin.ShowFacets.NEVER  # facet counts are a COUNT(*) per filter choice
    actions_on_bottom = False

    change_list_template = "admin/django_pgjobs/database_change_list.html"
    #: Whether its rows live on each jobs database (the switcher above its list picks one), or
    #: on ``PGJOBS["DATABASE"]`` alone (the outbox).
    on_every_database = True

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        """No filter from the query string reads inside a JSON column (a 400): counting rows
        of ``?kwargs__api_key__startswith=sk_a`` told masked REDACT_KEYS values."""
        try:
            field = self.model._meta.get_field(lookup.split(LOOKUP_SEP, 1)[0])
        except FieldDoesNotExist:
            field = None
        if isinstance(field, JSONField):
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_changelist(self, request, **kwargs):
        return CappedChangeList

    @property
    def urls(self):
        """Every page of this admin on the database its request chose (``databases``)."""
        if not self.on_every_database:
            return self.get_urls()
        return databases.on_chosen_database_urls(self.get_urls(), self.admin_site)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # detail pages are read-only; changes go through actions

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # no ORM deletes; the "delete" action goes through operations

    def _has_model_perm(self, request: HttpRequest, action: str) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")

    def has_operate_permission(self, request: HttpRequest, obj=None) -> bool:
        """Actions that change rows: ``change_<model>``."""
        return self._has_model_perm(request, "change")

    def has_remove_permission(self, request: HttpRequest, obj=None) -> bool:
        """Actions that remove rows for good: ``delete_<model>``."""
        return self._has_model_perm(request, "delete")

    def get_actions(self, request, action_location=None):
        # action_location: Django 6.1 also offers actions on change forms; 5.2 has no parameter.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)
        return actions

    def url_name(self, suffix: str, model_name: str | None = None) -> str:
        """Namespaced URL name of one of this app's admin pages (``reverse`` it)."""
        model_name = model_name or self.opts.model_name
        return f"{self.admin_site.name}:{self.opts.app_label}_{model_name}_{suffix}"

    def page_url(self, suffix: str, *args, model_name: str | None = None) -> str:
        """The URL of one of this app's admin pages (``url_name``), naming the database this
        page shows when there are several (``databases.on_this_database``)."""
        url = reverse(self.url_name(suffix, model_name), args=args)
        return databases.on_this_database(url) if self.on_every_database else url

    def route(self, pattern: str, view, suffix: str):
        """A URL of an extra page: behind ``admin_site.admin_view`` (login, staff, no cache)."""
        name = f"{self.opts.app_label}_{self.opts.model_name}_{suffix}"
        return path(pattern, self.admin_site.admin_view(view), name=name)

    def get_queryset(self, request):
        return super().get_queryset(request).using(self.database())

    def rows(self, model=None):
        """All rows of ``model`` (default: this admin's), on the jobs database."""
        return (model or self.model)._default_manager.using(self.database())

    def database(self) -> str:
        """Alias of the database this page shows: ``PGJOBS["DATABASE"]``, or with queues on
        several databases the one the page chose (``databases``). Every query of the admin runs
        there, the ORM's as well as the named statements'."""
        return databases.current() if self.on_every_database else get_config().DATABASE

    def connection(self):
        return db.jobs_connection(self.database())

    def page_context(self, request: HttpRequest, title: str, **extra) -> dict:
        """Context of a custom page: the admin's ``each_context`` plus the model's options."""
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "has_view_permission": self.has_view_permission(request),
            **extra,
        }

    def bulk_ids(self, queryset) -> tuple[list[int], bool]:
        """Ids of a selection, at most ``BULK_LIMIT``; True when the selection was larger."""
        ids = list(queryset.order_by().values_list("id", flat=True)[: BULK_LIMIT + 1])
        return ids[:BULK_LIMIT], len(ids) > BULK_LIMIT

    def report(self, request, done: str, skipped: str = "", truncated: bool = False) -> None:
        """One message per action: what was done ("Requeued 12 jobs."), and what was not."""
        if skipped:
            messages.warning(request, format_html("{} {}", done, skipped))
        else:
            messages.success(request, done)
        if truncated:
            messages.warning(
                request,
                _(
                    "Only the first %(limit)s selected rows were processed; run the action "
                    "again for the rest."
                )
                % {"limit": f"{BULK_LIMIT:,}"},
            )


class JobRowAdmin(OperatorAdmin):
    """Shared by jobs and dead letters: arguments, attempts, errors, timeline, action buttons.

    Subclasses name their ``row_actions`` and implement ``act_on`` (one action on one row,
    POSTed by the buttons of the detail page, permission already checked).
    """

    row_actions: dict = {}
    dead_letters = False  # rows of pgjobs_deadletter (their timeline ends with the death)
    json_columns: tuple[str, ...] = ("args", "kwargs")  # shown bounded, whole through value_view

    change_form_template = "admin/django_pgjobs/job_change_form.html"
    change_list_template = "admin/django_pgjobs/change_list.html"

    def get_search_results(self, request, queryset, search_term):
        """A number finds the row by id (``search_by_id``), anything else by job name, the
        dotted path's last part, or the subclass's other columns (``search_by_text``)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        number = row_id(term)
        if number is not None:
            return queryset.filter(self.search_by_id(number)), False
        return self.search_by_text(queryset, term), False

    def search_by_id(self, number: int) -> Q:
        return Q(id=number)

    def search_by_text(self, queryset, term: str):
        return queryset.filter(Q(name=term) | Q(name__endswith=f".{term}"))

    @admin.display(description=gettext_lazy("args"))
    def arguments(self, obj):
        return self.json_column(obj, "args")

    @admin.display(description=gettext_lazy("kwargs"))
    def keyword_arguments(self, obj):
        return self.json_column(obj, "kwargs")

    def json_column(self, obj, column: str) -> str:
        """A JSON column of ``obj`` (read by ``get_object``) as its detail page shows it: whole
        when short, else its head and a link to ``value_view`` (see ``values``)."""
        redact, needs_redaction = values.redactor(column, obj.name)
        head, total_bytes = json.loads(getattr(obj, f"{column}_preview"))
        preview = values.Preview.of(
            head,
            total_bytes,
            redact=redact,
            needs_redaction=needs_redaction,
            whole_text=lambda: self.stored_text(obj.pk, column),
        )
        return preview.html(self.page_url("value", obj.pk, column))

    def stored_text(self, pk: int, column: str) -> str | None:
        """PostgreSQL's text of one JSON column of one row (None: NULL, or the row is gone)."""
        return self.rows().filter(pk=pk).values_list(values.stored_text(column), flat=True).first()

    def get_object(self, request, object_id, from_field=None):
        """The row of a detail page, its JSON columns read as bounded text (``values``): a
        megabyte argument costs a few kilobytes, an error history its newest errors, and JSON
        that Python cannot read (a hand-made row) does not fail the page."""
        pk = row_id(object_id)
        if pk is None:
            return None
        return (
            self.get_queryset(request)
            .defer(*self.json_columns, "errors")
            .annotate(
                **values.preview_annotations(self.json_columns),
                newest_errors=values.NewestErrors("errors"),
            )
            .filter(pk=pk)
            .first()
        )

    def value_view(self, request, object_id, column):
        """The whole value of one JSON column, redacted, as ``application/json`` (the link
        under a long value of a detail page); needs the page's view permission."""
        require_view(self, request)
        pk = row_id(object_id)
        if pk is None or column not in self.json_columns:
            raise Http404("no such value")
        found = self.rows().filter(pk=pk).values_list("name", values.stored_text(column)).first()
        if found is None:
            raise Http404("no such row")
        name, stored = found
        try:
            body = values.whole_value_text(stored, column, name)
        except ValueError:
            raise PermissionDenied("keys to redact may be inside, and it cannot be read") from None
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        response["Content-Disposition"] = (
            f'inline; filename="{self.opts.model_name}-{pk}-{column}.json"'
        )
        response["X-Content-Type-Options"] = "nosniff"
        return response

    created = display.time_field("created_at", gettext_lazy("created at"))

    @admin.display(description=gettext_lazy("job name"))
    def job_name(self, obj):
        return display.short_name(obj.name)

    @admin.display(description=gettext_lazy("attempts"))
    def attempts_of_max(self, obj):
        return f"{obj.attempts}/{obj.max_attempts}"

    def actions_for(self, request, obj) -> list:
        """The actions valid for ``obj`` (permissions aside)."""
        return list(self.row_actions.values())

    def act(self, request, object_id, action):
        spec = self.row_actions.get(action)
        if spec is None:
            raise Http404("no such action")
        refused = refuse_mutation(self, request, spec.permission)
        if refused:
            return refused
        pk = row_id(object_id)
        if pk is None:
            raise Http404("no such row")
        if not confirm.confirmed(request, spec, "confirmed"):
            row = confirm.row_summaries(self, [pk])
            if row:  # else act_on says the row is gone
                return confirm.row_confirmation(self, request, spec, row[0])
        return self.act_on(request, pk, spec)

    def act_on(self, request, object_id, spec):
        raise NotImplementedError

    def extra_urls(self) -> list:
        return []

    def get_urls(self):
        return [
            *self.extra_urls(),
            self.route("<path:object_id>/do/<str:action>/", self.act, "act"),
            self.route("<path:object_id>/value/<str:column>/", self.value_view, "value"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # Here rather than in change_view: the row is the one Django read, not a second copy.
        if obj is not None:
            errors = display.error_history(obj, dead_letter=self.dead_letters)
            context = {
                "job_errors": errors,
                "timeline": display.timeline(obj, errors.entries, dead_letter=self.dead_letters),
                "job_actions": [
                    (
                        action,
                        self.page_url("act", obj.pk, action.name),
                    )
                    for action in self.actions_for(request, obj)
                    if getattr(self, f"has_{action.permission}_permission")(request)
                ],
                **context,
            }
        return super().render_change_form(request, context, add, change, form_url, obj)
