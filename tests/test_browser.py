"""The admin in a real browser: Playwright driving Debian's headless Chromium.

Logs in, reads the dashboard, filters the jobs list, requeues a dead letter and finds the job
back in the backlog; pauses a queue named with a "/" and opens a megabyte argument. What the
browser needs, and when the tests are skipped: ``browser_support``.
"""

from __future__ import annotations

import json
import signal

import pytest
from admin_data import PASSWORD, seed
from browser_support import log_in, screenshot, sync_api
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter
from testproject.handlers.aborting import recount

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_triage_in_a_browser(live_server, browser_page, django_user_model):
    rows = seed()
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    expect = sync_api.expect

    log_in(page, live_server.url, "/admin/django_pgjobs/job/dashboard/")

    # the dashboard: one row per queue, workers, the chart
    expect(page.locator("h1")).to_have_text("Jobs dashboard")
    expect(page.locator("#queue-emails")).to_contain_text("12")
    expect(page.locator("#queue-payments .pgjobs-expired")).to_have_text("1")  # a stuck lease
    expect(page.locator("#pgjobs-workers")).to_contain_text("web-2")
    assert page.locator("#pgjobs-throughput svg rect").count() > 60
    screenshot(page, "dashboard.png", full_page=True)

    # filter the jobs list: retrying, then one queue's due jobs
    page.click("text=Retrying")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list")).to_contain_text(
        "ConnectionError: payment gateway timed out"
    )
    page.locator("#changelist-filter a", has_text="emails").first.click()
    # An empty list has no #result_list at all: make sure this is the list page, saying 0 jobs.
    expect(page.locator("h1")).to_have_text("Select job to view")
    expect(page.locator("#changelist .paginator")).to_contain_text("0 jobs")
    expect(page.locator("#result_list tbody tr")).to_have_count(0)
    page.locator("#changelist-filter a", has_text="due").first.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(12)
    page.goto(f"{live_server.url}/admin/django_pgjobs/job/")
    screenshot(page, "jobs.png")

    # a dead letter: read why it died, requeue it, find it back in the backlog
    dead = DeadLetter.objects.filter(error_type="ConnectionError").order_by("-failed_at").first()
    page.goto(f"{live_server.url}/admin/django_pgjobs/deadletter/")
    page.get_by_role("link", name=f"#{dead.pk}", exact=True).click()
    expect(page.locator("#pgjobs-errors")).to_contain_text("gateway unreachable")
    expect(page.locator("#pgjobs-errors details[open] pre")).to_contain_text("Traceback")
    screenshot(page, "dead-letter.png", full_page=True)
    page.click("button:has-text('Requeue')")
    expect(page.locator(".messagelist")).to_contain_text("Requeued 1 job")
    expect(page.locator(".messagelist a", has_text="#")).to_have_count(1)  # the new job's page
    new_job = Job.objects.get(args=dead.args, queue=dead.queue, attempts=0)
    assert not DeadLetter.objects.filter(pk=dead.pk).exists()
    page.goto(f"{live_server.url}/admin/django_pgjobs/job/?view=due&queue={dead.queue}")
    expect(page.locator("#result_list")).to_contain_text(f"#{new_job.pk}")
    row = page.locator("#result_list tr", has_text=f"#{new_job.pk}")
    expect(row.locator(f'span[title="{dead.name}"]')).to_have_count(1)
    assert rows["retrying"].pk != new_job.pk


def test_abort_a_running_job_in_a_browser(
    live_server, browser_page, django_user_model, start_worker
):
    Counter.objects.create(name="long")
    long = recount.enqueue("long", 1200)  # a minute of work: only the abort ends it in time
    worker = start_worker("--queue", "handlers", env={"PGJOBS_HEARTBEAT_SECONDS": "30"})
    wait_until(lambda: Counter.objects.get(name="long").value > 0, timeout=60)
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    expect = sync_api.expect

    log_in(page, live_server.url, "/admin/django_pgjobs/job/")
    page.click("#changelist-filter a:text-is('running')")
    row = page.locator("#result_list tr", has_text=f"#{long.pk}")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "abort")
    page.click("button[name=index]")
    # Abort cannot be undone: a page names the job and asks first
    expect(page.locator("h1")).to_have_text("Abort: 1 job?")
    expect(page.locator(".pgjobs-confirm-rows")).to_contain_text(f"#{long.pk}")
    screenshot(page, "confirm-abort.png", full_page=True)
    page.click("input[type=submit][value='Yes, abort']")
    expect(page.locator(".messagelist")).to_contain_text("Abort requested for 1 running job")
    expect(page.locator(".messagelist a", has_text=f"#{long.pk}")).to_have_count(1)
    wait_until(lambda: DeadLetter.objects.filter(job_id=long.pk).exists(), timeout=20)
    page.goto(f"{live_server.url}/admin/django_pgjobs/deadletter/")
    expect(page.locator("#result_list")).to_contain_text("Aborted")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()


def test_hand_made_queue_names_and_long_values_in_a_browser(
    live_server, browser_page, django_user_model
):
    """A queue named with a "/" (a row written around enqueue()) is listed and paused from the
    dashboard; a job with a megabyte of arguments opens on a page of a few kilobytes, whose link
    opens the whole value."""
    queue = "reports/daily"
    Job.objects.create(name="testproject.demo.jobs.record", queue=queue, args=["by hand"])
    rows = [{"row": i, "sku": f"sku-{i:06d}", "tags": ["red", "large"]} for i in range(20000)]
    long = Job.objects.create(name="testproject.demo.jobs.record", args=rows, kwargs={"n": 1})
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    expect = sync_api.expect

    log_in(page, live_server.url, "/admin/django_pgjobs/job/dashboard/")
    row = page.locator(f'tr[id="queue-{queue}"]')
    expect(row).to_contain_text(queue)
    row.locator("button", has_text="Pause").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Paused queue {queue}.")
    expect(row.locator(".pgjobs-paused")).to_have_text("paused")
    screenshot(page, "hand-made-queue.png", full_page=True)

    response = page.goto(f"{live_server.url}/admin/django_pgjobs/job/{long.pk}/change/")
    assert len(response.body()) < 64 * 1024
    more = page.locator(".field-arguments .pgjobs-more")
    expect(more).to_contain_text("more bytes not shown")
    expect(page.locator(".field-arguments pre")).to_contain_text("sku-000000")
    screenshot(page, "long-value.png", full_page=True)
    with page.expect_navigation():
        more.get_by_role("link", name="Open the whole value").click()
    whole = page.evaluate("document.body.innerText")
    assert json.loads(whole) == rows
