"""Template tags and filters of the pgjobs admin pages."""

from __future__ import annotations

import functools
from pathlib import Path

import django.contrib.admin
from django import template

from ..admin import databases, display

register = template.Library()


@register.filter
def thousands(value) -> str:
    """``1234567`` -> ``1,234,567`` (without needing django.contrib.humanize installed)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def moment(value) -> str:
    """A time as every pgjobs page shows one (``display.when``): how long ago or ahead, in the
    current time zone, the exact time on hover."""
    return display.when(value)


@functools.cache
def breadcrumbs_are_a_list() -> bool:
    """Whether this Django's admin draws breadcrumbs as a list (``<ol class="breadcrumbs">``,
    one ``<li>`` per step: Django 6) or as links between ``›`` in a ``<div>`` (Django 5.2). Read
    from the admin's own base template, so our pages take the markup its stylesheet styles."""
    base = Path(django.contrib.admin.__file__).parent / "templates" / "admin" / "base.html"
    return '<ol class="breadcrumbs">' in base.read_text(encoding="utf-8")


@register.inclusion_tag("admin/django_pgjobs/includes/breadcrumbs.html", takes_context=True)
def pgjobs_breadcrumbs(context, *trail):
    """Home › the app › ``trail``, in this Django's markup. ``trail`` alternates a label and its
    link, and ends with the label of the page itself: ``"Dead letters" url "By error"``; or it
    is one list of those."""
    if len(trail) == 1 and isinstance(trail[0], list | tuple):
        trail = tuple(trail[0])
    steps = [(trail[i], trail[i + 1]) for i in range(0, len(trail) - 1, 2)]
    return {
        "as_list": breadcrumbs_are_a_list(),
        "opts": context["opts"],
        "steps": steps,
        "here": trail[-1] if trail else "",
    }


@register.inclusion_tag("admin/django_pgjobs/includes/databases.html")
def pgjobs_databases(model_admin, links: bool = True) -> dict:
    """With queues on several databases: which one the page shows, and (``links``) a link to
    each other one (``admin/databases.py``). Nothing with one database, or on the pages of what
    lives on ``PGJOBS["DATABASE"]`` alone (the outbox)."""
    if not getattr(model_admin, "on_every_database", False):
        return {"databases": []}
    found = databases.switcher()
    return {"databases": found if links else [entry for entry in found if entry[2]]}
