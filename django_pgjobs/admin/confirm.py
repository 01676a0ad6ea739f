"""Asking before an action that cannot be undone, and saying afterwards which rows it touched.

An action with ``confirm`` (abort, cancel, delete for good) runs only from the form of its
confirmation page: a POST, with the CSRF token, re-checked against the action's permission when
it comes back. The first click (a button of a detail page, or the list's action menu) only
shows that page: the rows it would touch, what happens to them, "Yes" and "No".

The result message names the rows the action touched, each one a link to its page while it
still exists, and the selection as a link to the list filtered to those ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst
from django.utils.translation import gettext as _

#: Rows a confirmation page lists one by one; the rest are counted.
LISTED_ROWS = 100
#: Ids a result message names one by one; the rest are counted and reached by its list link.
NAMED_IDS = 10
#: Ids in the link to the list of the rows touched (a URL stays well under browsers' limits).
LINKED_IDS = 200


def confirmation_page(model_admin, request, spec, rows, *, total, hidden, back_url, trail=()):
    """The page asking whether to run ``spec`` on ``rows`` (``(id, name, queue)``, the first
    ``LISTED_ROWS`` of ``total``). Its form POSTs ``hidden`` (name, value) pairs back to the URL
    it was asked from."""
    opts = model_admin.opts
    count = f"{total:,} {opts.verbose_name if total == 1 else opts.verbose_name_plural}"
    changelist_url = model_admin.page_url("changelist")
    context = model_admin.page_context(
        request,
        _("%(action)s: %(count)s?") % {"action": spec.label, "count": count},
        action=spec,
        rows=[(*row, model_admin.page_url("change", row[0])) for row in rows],
        unlisted=max(total - len(rows), 0),
        hidden=hidden,
        form_url=request.get_full_path(),
        back_url=back_url,
        trail=[
            capfirst(opts.verbose_name_plural),
            changelist_url,
            *trail,
            _("%(action)s?") % {"action": spec.label},
        ],
    )
    return TemplateResponse(request, "admin/django_pgjobs/confirm_action.html", context)


def bulk_confirmation(model_admin, request, spec, ids: Sequence[int], left_alone: int = 0):
    """The confirmation of a list action on ``ids``: "Yes" sends the same selection back to the
    list (``post=yes``), where Django's action handling runs it again, permission included."""
    rows = row_summaries(model_admin, ids[:LISTED_ROWS])
    hidden = [
        ("action", spec.name),
        ("index", "0"),
        ("select_across", request.POST.get("select_across", "0")),
        ("post", "yes"),
        *(("_selected_action", value) for value in request.POST.getlist("_selected_action")),
    ]
    response = confirmation_page(
        model_admin,
        request,
        spec,
        rows,
        total=len(ids),
        hidden=hidden,
        back_url=request.get_full_path(),
    )
    response.context_data["left_alone"] = left_alone
    return response


def row_confirmation(model_admin, request, spec, row):
    """The confirmation of a detail page's button for ``row`` (``(id, name, queue)``)."""
    pk = row[0]
    page = model_admin.page_url("change", pk)
    return confirmation_page(
        model_admin,
        request,
        spec,
        [row],
        total=1,
        hidden=[("confirmed", "yes")],
        back_url=page,
        trail=[f"#{pk}", page],
    )


def row_summaries(model_admin, ids: Sequence[int]) -> list[tuple]:
    return list(
        model_admin.rows()
        .filter(id__in=list(ids))
        .order_by("id")
        .values_list("id", "name", "queue")
    )


def confirmed(request, spec, field: str) -> bool:
    """Whether ``spec`` may run now: it needs no confirmation, or this POST is the answer of its
    confirmation page (``field`` = ``yes``)."""
    return not spec.confirm or request.POST.get(field) == "yes"


def rows_touched(model_admin, text: str, ids: Sequence[int], model_name: str | None) -> str:
    """``text`` ("Requeued 4 jobs.") followed by the ids it touched: links to the pages of the
    rows of ``model_name`` (the new jobs of a requeue...) and to their list; plain ids when the
    rows are gone (``model_name`` None)."""
    if not ids:
        return text
    named = ids[:NAMED_IDS]
    if model_name is None:
        names = format_html_join(", ", "#{}", ((pk,) for pk in named))
    else:
        names = format_html_join(
            ", ",
            '<a href="{}">#{}</a>',
            ((model_admin.page_url("change", pk, model_name=model_name), pk) for pk in named),
        )
    more = (
        format_html(_(" and {} more"), f"{len(ids) - len(named):,}")
        if len(ids) > len(named)
        else ""
    )
    listed = ""
    if model_name is not None and len(ids) > 1:
        changelist = model_admin.page_url("changelist", model_name=model_name)
        shown = ",".join(str(pk) for pk in ids[:LINKED_IDS])
        label = (
            _("list the first %(count)s") % {"count": f"{LINKED_IDS:,}"}
            if len(ids) > LINKED_IDS
            else _("list them")
        )
        separator = "&" if "?" in changelist else "?"
        listed = format_html(
            ' (<a href="{}{}id__in={}">{}</a>)', changelist, separator, shown, label
        )
    return format_html("{}: {}{}{}.", text.rstrip("."), names, more, listed)
