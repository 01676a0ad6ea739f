"""Which jobs database an admin page shows, when queues live on several
(``PGJOBS["QUEUE_DATABASES"]``, docs/howto/databases.md).

The dashboard shows every database at once. The other pages (jobs, dead letters, queues,
workers, workflows) show one: the one ``?_database=<alias>`` names, kept in the session for the
pages after it (breadcrumbs, the sidebar), else ``PGJOBS["DATABASE"]``. A switcher above each
list names them all, and the links and forms of a page carry its database: a row's link, its
action buttons, a changelist's action form (posted to the page's own URL), so an action always
runs on the database of the page it was chosen on, whatever another tab switched to meanwhile.
With one database nothing of this shows.
"""

from __future__ import annotations

import contextvars
import functools
from urllib.parse import urlencode

from django.urls import URLPattern

from ..conf import get_config, job_databases

#: The query parameter naming the database of a page.
PARAM = "_database"
SESSION_KEY = "pgjobs_admin_database"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pgjobs_admin_database", default=None
)


def current() -> str:
    """The alias of the database the page being drawn shows."""
    return _current.get() or get_config().DATABASE


def several() -> bool:
    return len(job_databases()) > 1


def chosen(request) -> str:
    """The database ``request`` asks for (its ``?_database=``, else the session's), remembered
    in the session; ``PGJOBS["DATABASE"]`` when it names none that holds jobs."""
    aliases = job_databases()
    session = getattr(request, "session", None)
    asked = request.GET.get(PARAM)
    if asked in aliases:
        if session is not None and session.get(SESSION_KEY) != asked:
            session[SESSION_KEY] = asked
        return asked
    saved = session.get(SESSION_KEY) if session is not None else None
    return saved if saved in aliases else aliases[0]


def on_chosen_database(view):
    """``view`` with ``current()`` naming the database its request chose; with several, a
    template response is drawn before it returns, so that what it reads lazily reads the same
    database (with one, the view is left as it is)."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not several():
            return view(request, *args, **kwargs)
        token = _current.set(chosen(request))
        try:
            response = view(request, *args, **kwargs)
            if not getattr(response, "is_rendered", True):
                response.render()
            return response
        finally:
            _current.reset(token)

    return wrapper


def on_chosen_database_urls(patterns: list) -> list:
    """``patterns`` (an admin's URLs) with each view ``on_chosen_database``."""
    return [
        URLPattern(p.pattern, on_chosen_database(p.callback), p.default_args, p.name)
        if isinstance(p, URLPattern)
        else p
        for p in patterns
    ]


def url_query(alias: str | None = None, separator: str = "?") -> str:
    """``?_database=<alias>`` (of ``current()`` by default) to append to a URL, or "" with one
    database."""
    if not several():
        return ""
    return separator + urlencode({PARAM: alias or current()})


def switcher() -> list[tuple[str, str, bool]]:
    """(alias, its query, whether it is the current one) of each jobs database; empty with
    one."""
    if not several():
        return []
    now = current()
    return [(alias, url_query(alias), alias == now) for alias in job_databases()]
