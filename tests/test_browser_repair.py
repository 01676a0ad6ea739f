"""The repair bench in a real browser (docs/howto/repair.md): a dead letter's arguments edited,
an edit that does not fit the job refused with the reason, a fitting one requeued and run by a
real ``runjobs``. What the browser needs: ``browser_support``."""

from __future__ import annotations

import signal

import pytest
from admin_data import PASSWORD, dead_letter
from browser_support import log_in, sync_api
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job
from testproject.demo.models import Counter

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_edit_a_dead_letter_and_requeue_it_in_a_browser(
    live_server, browser_page, django_user_model, start_worker
):
    Counter.objects.create(name="score")
    # enqueued before a deploy renamed the parameter "point" to "points": it died BadArguments
    dead = dead_letter(
        name="testproject.handlers.basics.add_points",
        queue="handlers",
        args=["score"],
        kwargs={"point": 5},
        error_type="BadArguments",
    )
    django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    page = browser_page
    expect = sync_api.expect

    log_in(page, live_server.url, f"/admin/django_pgjobs/deadletter/{dead.pk}/change/")
    page.click("#pgjobs-edit")
    expect(page.locator("h1")).to_have_text(f"Edit and requeue dead letter #{dead.pk}")
    expect(page.locator("#pgjobs-signature")).to_contain_text("(counter: str, points: int)")

    # an edit that does not fit the signature: refused with the reason, nothing written
    page.fill("#id_kwargs", '{"point": 5, "bonus": 1}')
    page.click("input[type=submit][value='Check and requeue']")
    expect(page.locator("#pgjobs-refused")).to_contain_text("missing a required argument")
    expect(page.locator("#id_kwargs")).to_have_value('{"point": 5, "bonus": 1}')  # kept
    assert DeadLetter.objects.filter(pk=dead.pk).exists()
    assert not Job.objects.exists()

    # a fitting one: requeued as a new job, linked back, with who changed what
    page.fill("#id_kwargs", '{"points": 5}')
    page.click("input[type=submit][value='Check and requeue']")
    expect(page.locator(".messagelist")).to_contain_text(
        f"Requeued dead letter #{dead.pk} with edited arguments as job"
    )
    job = Job.objects.get()
    expect(page).to_have_url(f"{live_server.url}/admin/django_pgjobs/job/{job.pk}/change/")
    expect(page.locator(".field-repair_trail")).to_contain_text(
        f"Requeued from dead letter #{dead.pk}"
    )
    expect(page.locator(".field-repair_trail")).to_contain_text("admin user 'operator'")
    assert not DeadLetter.objects.filter(pk=dead.pk).exists()

    worker = start_worker("--queue", "handlers")
    wait_until(lambda: Counter.objects.get(name="score").value == 5, timeout=60)
    wait_until(lambda: not Job.objects.exists(), timeout=30)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
    assert not DeadLetter.objects.exists()
