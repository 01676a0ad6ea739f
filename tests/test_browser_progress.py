"""A running job's progress in the admin, in a browser: a real worker runs a job that reports
its progress at each step and waits for the test to let it go on; the running view shows each
step as the job reports it, and the job's page its metadata."""

from __future__ import annotations

import signal

import pytest
from browser_support import open_as_operator, sync_api
from django.db.models import F
from helpers import wait_until

from django_pgjobs.models import Job
from testproject.demo import jobs as demo
from testproject.demo.models import Counter

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def reported(job_id: int, done: int) -> bool:
    progress = Job.objects.get(pk=job_id).progress
    return bool(progress) and progress["done"] == done


def test_a_running_jobs_progress_in_the_admin(
    live_server, browser_page, django_user_model, start_worker
):
    Counter.objects.create(name="gate", value=0)
    queued = demo.stepwise.enqueue("gate", 4)
    worker = start_worker("--queue", "default")
    wait_until(lambda: reported(queued.pk, 0), timeout=60, interval=0.05)
    page, expect = browser_page, sync_api.expect
    open_as_operator(page, live_server.url, django_user_model, "/admin/django_pgjobs/job/")
    page.click("#changelist-filter a:text-is('running')")  # the running view
    row = page.locator("#result_list tr", has_text=f"#{queued.pk}")
    expect(row).to_contain_text("0 of 4 (0%)")
    expect(row).to_contain_text("waiting at step 1")
    Counter.objects.filter(name="gate").update(value=F("value") + 2)  # two steps on
    wait_until(lambda: reported(queued.pk, 2), timeout=30, interval=0.05)
    page.reload()
    expect(row).to_contain_text("2 of 4 (50%)")
    expect(row).to_contain_text("waiting at step 3")
    expect(row.locator("progress")).to_have_attribute("value", "0.500")

    page.click(f"#result_list a:text-is('#{queued.pk}')")
    expect(page.locator(".field-job_progress")).to_contain_text("2 of 4 (50%)")
    expect(page.locator(".field-job_metadata")).to_contain_text('"gate": "gate"')

    Counter.objects.filter(name="gate").update(value=4)
    wait_until(lambda: Job.objects.get(pk=queued.pk).status == "successful", timeout=30)
    page.reload()
    expect(page.locator(".field-job_progress")).to_contain_text("4 of 4 (100%)")
    expect(page.locator(".field-job_progress")).to_contain_text("all steps done")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
