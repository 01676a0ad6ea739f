"""Template filters of the pgjobs admin pages."""

from django import template

register = template.Library()


@register.filter
def thousands(value) -> str:
    """``1234567`` -> ``1,234,567`` (without needing django.contrib.humanize installed)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)
