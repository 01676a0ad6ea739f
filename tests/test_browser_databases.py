"""The admin with queues on two databases in a real browser (docs/howto/databases.md): the
dashboard shows both, a queue's link opens the list of its database, a job's button acts there,
the switcher above the list changes database. What the browser needs: ``browser_support``."""

from __future__ import annotations

import pytest
from admin_data import PASSWORD
from browser_support import log_in, screenshot, sync_api

from django_pgjobs.models import Job
from testproject.demo import jobs as demo
from testproject.handlers.databases import build_report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(databases=["default", "jobs2"], transaction=True),
]


def test_both_databases_in_a_browser(live_server, browser_page, django_user_model, settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_DATABASES": {"heavy": "jobs2"}}
    build_report.using(delay=3600).enqueue("2026-10")
    demo.record.enqueue("on default")
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page, expect = browser_page, sync_api.expect

    log_in(page, live_server.url, "/admin/django_pgjobs/job/dashboard/")
    expect(page.locator("#queue-jobs2-heavy .pgjobs-database")).to_have_text("jobs2")
    expect(page.locator("#queue-default-default .pgjobs-database")).to_have_text("default")
    screenshot(page, "dashboard-databases.png")

    # the queue's scheduled jobs, from its row: the list of jobs2
    page.locator("#queue-jobs2-heavy td.num a").nth(1).click()
    expect(page.locator("#pgjobs-databases strong")).to_have_text("jobs2")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list")).to_contain_text("build_report")
    screenshot(page, "jobs-databases.png")

    # its page, and its button: the job of jobs2 runs now, whatever default holds
    page.locator("#result_list tbody tr th a").first.click()
    expect(page.locator("#pgjobs-databases")).to_have_text("Database: jobs2")
    page.click("button:has-text('Run now')")
    expect(page.locator(".messagelist")).to_contain_text("Set 1 job to run now")
    assert Job.objects.using("jobs2").get().view == "due"

    # the switcher: back to default's jobs
    page.goto(f"{live_server.url}/admin/django_pgjobs/job/")
    page.locator("#pgjobs-databases a", has_text="default").click()
    expect(page.locator("#pgjobs-databases strong")).to_have_text("default")
    expect(page.locator("#result_list")).to_contain_text("record")
    expect(page.locator("#result_list")).not_to_contain_text("build_report")
