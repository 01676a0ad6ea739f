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

from django.db import DatabaseError
from django.http import HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern
from django.utils.translation import gettext as _

from ..conf import get_config, job_databases
from ..db import JobsTableMissing
from .display import one_line

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


def on_chosen_database(view, site=None):
    """``view`` with ``current()`` naming the database its request chose; with several, a
    template response is drawn before it returns, so that what it reads lazily reads the same
    database (with one, the view is left as it is).

    With several, a page's URL always names its database: a GET without ``?_database=`` (the
    sidebar, a breadcrumb, a bookmark) is redirected to the same URL naming the session's, so
    that the forms it shows (a changelist's action form posts to the page's own URL) carry it;
    a POST without it is refused (400) rather than run on whichever database the session names
    by then, and so is any request naming a database that holds no jobs (not run on the
    session's). A database that cannot be read gives a page saying so, with the switcher to the
    others (503), not a server error: ``site`` (the admin site) draws it."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not several():
            return view(request, *args, **kwargs)
        if not _signed_in(request, site):  # the admin's own check answers (the login page)
            return view(request, *args, **kwargs)
        alias = chosen(request)
        asked = request.GET.get(PARAM)
        if asked is not None and asked != alias:  # names no jobs database: not another one's
            return HttpResponseBadRequest(
                _("No jobs database is named %(asked)s (they are: %(aliases)s): nothing was done.")
                % {"asked": asked[:100], "aliases": ", ".join(job_databases())},
                content_type="text/plain; charset=utf-8",
            )
        if PARAM not in request.GET:
            if request.method in ("GET", "HEAD"):
                return HttpResponseRedirect(on_this_database(request.get_full_path(), alias))
            return HttpResponseBadRequest(
                _(
                    "This form does not say which jobs database it is for: nothing was done. "
                    "Reload the page and try again."
                ),
                content_type="text/plain; charset=utf-8",
            )
        token = _current.set(alias)
        try:
            response = view(request, *args, **kwargs)
            if not getattr(response, "is_rendered", True):
                response.render()
            return response
        except (DatabaseError, JobsTableMissing) as error:
            if site is None:
                raise
            return unavailable(request, site, alias, error)
        finally:
            _current.reset(token)

    return wrapper


def _signed_in(request, site) -> bool:
    """Whether the admin lets ``request`` in (``site.has_permission``: an active staff user by
    default): the answers about databases are for those it does, the others get its login
    page from the view."""
    if site is not None:
        return site.has_permission(request)
    user = getattr(request, "user", None)
    return bool(user and user.is_active and user.is_staff)


def unavailable(request, site, alias: str, error: Exception) -> TemplateResponse:
    """The page of a jobs database that cannot be read (down, or not migrated): what failed,
    and the switcher to the others."""
    context = {
        **site.each_context(request),
        "title": _("The jobs database %(alias)s cannot be read") % {"alias": alias},
        "alias": alias,
        "error": one_line(str(error), 300),
        "switcher": switcher(),
    }
    response = TemplateResponse(
        request, "admin/django_pgjobs/database_unavailable.html", context, status=503
    )
    return response.render()


def on_chosen_database_urls(patterns: list, site=None) -> list:
    """``patterns`` (an admin's URLs) with each view ``on_chosen_database``."""
    return [
        URLPattern(p.pattern, on_chosen_database(p.callback, site), p.default_args, p.name)
        if isinstance(p, URLPattern)
        else p
        for p in patterns
    ]


def on_this_database(url: str, alias: str | None = None) -> str:
    """``url`` naming the database ``alias`` (``current()`` by default) in its query, added to
    the query it has; ``url`` as it is with one database."""
    if not several():
        return url
    return url + ("&" if "?" in url else "?") + urlencode({PARAM: alias or current()})


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
