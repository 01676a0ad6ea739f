"""What the browser tests share: Playwright driving Debian's headless Chromium, logged in as
an operator, and the screenshots of the docs.

Needs ``/usr/bin/chromium`` (``apt-get install chromium``) and the ``browser`` extra (``pip
install playwright``); Playwright's own browser download is not used. Without them the tests
are skipped, unless ``PGJOBS_REQUIRE_BROWSER=1`` (CI): then they fail. ``PGJOBS_SCREENSHOTS=1``
writes the screenshots to docs/img/.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from admin_data import PASSWORD
from django.db import connections

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "img"

try:
    from playwright import sync_api
except ImportError:
    sync_api = None


def require_browser() -> None:
    """Skip when Playwright or Chromium is missing; fail instead under PGJOBS_REQUIRE_BROWSER=1."""
    missing = []
    if sync_api is None:
        missing.append("playwright is not installed (pip install -e '.[browser]')")
    if not os.path.exists(CHROMIUM):
        missing.append(f"{CHROMIUM} is missing (apt-get install chromium)")
    if not missing:
        return
    if os.environ.get("PGJOBS_REQUIRE_BROWSER") == "1":
        pytest.fail("PGJOBS_REQUIRE_BROWSER=1 but " + "; ".join(missing), pytrace=False)
    pytest.skip("; ".join(missing))


@pytest.fixture
def browser_page(monkeypatch):
    require_browser()
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.set_default_timeout(15_000)
        try:
            yield page
        finally:
            browser.close()
            # ORM calls made while Playwright's loop runs use a connection of their own
            # context; close it so the test database can be dropped at the end of the run.
            connections.close_all()


def screenshot(page, name: str, **options) -> None:
    if os.environ.get("PGJOBS_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / name), **options)


def log_in(page, base_url: str, path: str) -> None:
    """Open ``path`` as "operator": the admin sends an anonymous visitor to its login page."""
    page.goto(f"{base_url}{path}")
    # (with queues on several databases the page first names its database: ?_database=...)
    login = re.escape(f"{base_url}/admin/login/?next={quote(path, safe='/')}")
    sync_api.expect(page).to_have_url(re.compile(f"{login}((%3F|%26)_database%3D\\w+)?$"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    # fold the admin's navigation sidebar away: more room for the tables (and the screenshots)
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page.reload()


def open_as_operator(page, base_url: str, user_model, path: str) -> None:
    """Create the "operator" superuser and open ``path`` logged in as them."""
    user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    log_in(page, base_url, path)
