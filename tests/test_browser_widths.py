"""The admin's pages at a laptop's width (1,280 px) and a desktop's (1,920 px), in a real browser.

Nothing overflows (no page, table or list scrolls sideways), so every column is in view, the
key ones first; the breadcrumbs are styled as the admin's own (Django 5.2 and 6 mark them up
differently). With ``PGJOBS_SCREENSHOTS=1`` each page is saved to docs/img/ per width and
Django line (``dashboard-1280-django6.png``...). Browser requirements: ``browser_support``.
"""

from __future__ import annotations

import django
import pytest
from admin_data import PASSWORD, seed
from browser_support import log_in, screenshot
from django.urls import reverse

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 1920)
DJANGO_LINE = f"django{django.VERSION[0]}"

#: Elements wider than their box: the document, Django's list (``.results`` scrolls sideways
#: rather than overflow the page) and the tables of the pgjobs pages.
OVERFLOWS = """() => {
  const found = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth) found.push(`document: ${doc.scrollWidth} > ${doc.clientWidth}`);
  for (const box of document.querySelectorAll('.results, .pgjobs-section, #content-main, #changelist')) {
    if (box.scrollWidth > box.clientWidth + 1)
      found.push(`${box.id || box.className}: ${box.scrollWidth} > ${box.clientWidth}`);
  }
  return found;
}"""

#: Where the breadcrumbs' links are drawn and in which colour: styled ones sit on the admin's
#: dark bar, unstyled ones are plain blue links on white.
BREADCRUMBS = """() => {
  const bar = document.querySelector('.breadcrumbs');
  if (!bar) return null;
  return {tag: bar.tagName.toLowerCase(), background: getComputedStyle(bar).backgroundColor};
}"""


def pages(rows) -> dict[str, str]:
    return {
        "dashboard": reverse("admin:django_pgjobs_job_dashboard"),
        "jobs": reverse("admin:django_pgjobs_job_changelist"),
        "retrying-jobs": reverse("admin:django_pgjobs_job_changelist") + "?view=retrying",
        "job": reverse("admin:django_pgjobs_job_change", args=[rows["retrying"].pk]),
        "dead-letters": reverse("admin:django_pgjobs_deadletter_changelist"),
        "dead-letters-by-error": reverse("admin:django_pgjobs_deadletter_summary"),
    }


@pytest.mark.parametrize("sidebar", ["sidebar-open", "sidebar-closed"])
def test_pages_fit_at_1280_and_1920_px(live_server, browser_page, django_user_model, sidebar):
    rows = seed()
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    log_in(page, live_server.url, "/admin/")
    open_sidebar = "true" if sidebar == "sidebar-open" else "false"
    page.evaluate(f"localStorage.setItem('django.admin.navSidebarIsOpen', '{open_sidebar}')")
    page.goto(live_server.url + reverse("admin:django_pgjobs_job_changelist"))
    reference = page.evaluate(BREADCRUMBS)  # Django's own list page: its own markup
    problems = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages(rows).items():
            page.goto(live_server.url + path)
            for overflow in page.evaluate(OVERFLOWS):
                problems.append(f"{name} at {width} px ({sidebar}): {overflow}")
            crumbs = page.evaluate(BREADCRUMBS)
            if crumbs != reference:
                problems.append(f"{name}: breadcrumbs {crumbs}, Django's own {reference}")
            if sidebar == "sidebar-closed":
                screenshot(page, f"{name}-{width}-{DJANGO_LINE}.png", full_page=True)
    assert not problems, "\n".join(problems)


def test_german_pages_fit_at_1280_px(live_server, browser_page, django_user_model):
    """German words are longer than English ones ("Reservierungen" for "leases"): the pages
    still fit the narrowest screen, the navigation sidebar open, for a German browser."""
    rows = seed()
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    page.set_extra_http_headers({"Accept-Language": "de-DE,de;q=0.9"})
    log_in(page, live_server.url, "/admin/")
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    page.set_viewport_size({"width": 1280, "height": 900})
    problems = []
    for name, path in pages(rows).items():
        page.goto(live_server.url + path)
        assert page.evaluate("document.documentElement.lang") == "de"
        problems += [f"{name}: {overflow}" for overflow in page.evaluate(OVERFLOWS)]
        screenshot(page, f"{name}-1280-de-{DJANGO_LINE}.png", full_page=True)
    assert not problems, "\n".join(problems)
