"""The admin as each Django line draws it: breadcrumbs, the dashboard's entry, one way of showing
times, confirmation pages for what cannot be undone, and result messages that link to the rows.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from admin_data import dead_letter, job, make_user, messages_text, said, seed
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgjobs.admin import confirm
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.templatetags.pgjobs_admin import breadcrumbs_are_a_list

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pgjobs_job_changelist")
DEAD = reverse("admin:django_pgjobs_deadletter_changelist")
DASHBOARD = reverse("admin:django_pgjobs_job_dashboard")
SUMMARY = reverse("admin:django_pgjobs_deadletter_summary")
BREADCRUMBS = re.compile(r'<(ol|div) class="breadcrumbs">(.*?)</\1>', re.S)


def breadcrumbs(page: str) -> tuple[str, list[str]]:
    """The breadcrumbs' element and the text of each step."""
    match = BREADCRUMBS.search(page)
    assert match, "no breadcrumbs"
    tag, inner = match.groups()
    if tag == "ol":
        steps = re.findall(r"<li[^>]*>(.*?)</li>", inner, re.S)
    else:
        steps = inner.split("&rsaquo;")
    return tag, [re.sub(r"<[^>]+>", "", step).strip() for step in steps]


def test_our_pages_draw_breadcrumbs_as_the_admins_own_pages_do(admin_client):
    dead = dead_letter()
    own_tag, own_steps = breadcrumbs(admin_client.get(JOBS).content.decode())
    assert own_tag == ("ol" if breadcrumbs_are_a_list() else "div")
    app = own_steps[1]  # the app's verbose name
    assert own_steps == ["Home", app, "Jobs"]
    expected = {
        DASHBOARD: ["Home", app, "Dashboard"],
        SUMMARY: ["Home", app, "Dead letters", "By error and job"],
    }
    for url, steps in expected.items():
        assert breadcrumbs(admin_client.get(url).content.decode()) == (own_tag, steps)
    asked = admin_client.post(
        reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "delete"])
    )
    page = asked.content.decode()
    steps = ["Home", app, "Dead letters", f"#{dead.pk}", "Delete for good?"]
    assert breadcrumbs(page) == (own_tag, steps)


def test_the_dashboard_is_linked_from_the_admin_index_and_the_apps_page(admin_client):
    entry = reverse("admin:django_pgjobs_dashboard_changelist")
    for url in (reverse("admin:index"), reverse("admin:app_list", args=["django_pgjobs"])):
        page = admin_client.get(url).content.decode()
        assert re.search(rf'<a href="{entry}"[^>]*>Dashboard</a>', page), url
    assert admin_client.get(entry)["Location"] == DASHBOARD


def test_the_dashboard_entry_is_for_those_who_may_see_jobs_only():
    entry = reverse("admin:django_pgjobs_dashboard_changelist")
    dead_only = Client()
    dead_only.force_login(make_user("dead-only", perms=("view_deadletter",)))
    assert "Dashboard" not in dead_only.get(reverse("admin:index")).content.decode()
    assert dead_only.get(entry).status_code == 403
    viewer = Client()
    viewer.force_login(make_user("job-viewer", perms=("view_job",)))
    assert f'href="{entry}"' in viewer.get(reverse("admin:index")).content.decode()
    assert viewer.get(entry)["Location"] == DASHBOARD


def test_the_dead_letters_by_error_page_counts_every_dead_letter(admin_client):
    for index in range(8):  # no ANALYZE since: the planner's estimate of the table is 0
        dead_letter(args=[index])
    page = admin_client.get(SUMMARY).content.decode()
    assert "8 dead letters in all" in page


def test_the_dead_letters_total_stops_at_the_cap(admin_client, monkeypatch):
    monkeypatch.setattr("django_pgjobs.overview.COUNT_CAP", 3)
    for index in range(5):
        dead_letter(args=[index])
    assert "more than 3 dead letters in all" in admin_client.get(SUMMARY).content.decode()


def test_a_job_page_shows_every_time_one_way_with_the_exact_time_on_hover(admin_client):
    rows = seed()
    page = admin_client.get(
        reverse("admin:django_pgjobs_job_change", args=[rows["retrying"].pk])
    ).content.decode()
    main = page[page.index('id="content-main"') :]
    times = re.findall(
        r'<time datetime="[^"]+" title="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [^"]+)">', main
    )
    # created, run after, started; the timeline's four events; the two errors
    assert len(times) >= 9, times
    assert not re.search(r"\b(a\.m\.|p\.m\.)", main), "Django's own date format is left"
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", re.sub(r'datetime="[^"]+"', "", main))


def test_abort_asks_first_and_no_answers_no_abort(admin_client):
    busy = job(status="running", attempts=1, lease_expires_at=timezone.now() + timedelta(minutes=1))
    act = reverse("admin:django_pgjobs_job_act", args=[busy.pk, "abort"])
    asked = admin_client.post(act)
    page = asked.content.decode()
    assert asked.status_code == 200 and "This cannot be undone" in page
    assert 'name="csrfmiddlewaretoken"' in page and 'name="confirmed" value="yes"' in page
    assert f'<form method="post" action="{act}">' in page
    assert Job.objects.get(pk=busy.pk).abort_requested_at is None  # asking changed nothing
    done = admin_client.post(act, {"confirmed": "yes"})
    assert done.status_code == 302
    assert Job.objects.get(pk=busy.pk).abort_requested_at is not None


def test_a_list_action_that_cannot_be_undone_asks_first_with_the_same_selection(admin_client):
    waiting = [job(args=[i]) for i in range(3)]
    running = job(status="running", attempts=1, lease_expires_at=timezone.now())
    ids = [str(j.pk) for j in (*waiting, running)]
    url = JOBS + "?queue=default"
    asked = admin_client.post(url, {"action": "cancel", "_selected_action": ids, "index": 0})
    page = asked.content.decode()
    assert asked.status_code == 200 and Job.objects.count() == 4
    assert "Cancel job: 3 jobs?" in page and "1 other selected job is not" in page
    for row in waiting:
        assert f"#{row.pk}</a>" in page
    form = re.search(r'<form method="post" action="([^"]+)">(.*?)</form>', page, re.S)
    assert form.group(1).replace("&amp;", "&") == url  # back to the same filtered list
    hidden = dict(
        re.findall(r'<input type="hidden" name="(action|post|index)" value="([^"]*)"', page)
    )
    assert hidden == {"action": "cancel", "post": "yes", "index": "0"}
    selected = re.findall(r'name="_selected_action" value="(\d+)"', form.group(2))
    assert selected == ids
    answered = admin_client.post(url, {**hidden, "_selected_action": selected})
    assert answered.status_code == 302
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]


def test_asking_needs_the_actions_permission():
    busy = job(status="running", attempts=1, lease_expires_at=timezone.now())
    dead = dead_letter()
    viewer = Client()
    viewer.force_login(make_user("viewer", perms=("view_job", "view_deadletter")))
    assert (
        viewer.post(reverse("admin:django_pgjobs_job_act", args=[busy.pk, "abort"])).status_code
        == 403
    )
    delete = reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "delete"])
    assert viewer.post(delete).status_code == 403
    asked = viewer.post(DEAD, {"action": "delete", "_selected_action": [dead.pk], "index": 0})
    assert "Delete for good" not in asked.content.decode()  # not offered: "no action selected"
    assert DeadLetter.objects.filter(pk=dead.pk).exists()
    assert (
        viewer.get(reverse("admin:django_pgjobs_job_act", args=[busy.pk, "abort"])).status_code
        == 405
    )


def test_result_messages_link_to_the_rows_they_touched(admin_client):
    dead = [dead_letter(args=[i]) for i in range(4)]
    response = admin_client.post(
        DEAD, {"action": "requeue", "_selected_action": [d.pk for d in dead], "index": 0}
    )
    new = sorted(Job.objects.values_list("pk", flat=True))
    [message] = [str(m) for m in response.wsgi_request._messages]
    for pk in new:
        assert (
            f'<a href="{reverse("admin:django_pgjobs_job_change", args=[pk])}">#{pk}</a>' in message
        )
    assert f'href="{JOBS}?id__in={",".join(map(str, new))}"' in message
    assert said(response) == ["Requeued 4 jobs."]
    listed = admin_client.get(f"{JOBS}?id__in={','.join(map(str, new))}")
    assert sorted(j.pk for j in listed.context["cl"].result_list) == new


def test_messages_name_the_rows_gone_without_links_and_count_past_ten(admin_client):
    dead = [dead_letter(args=[i]) for i in range(12)]
    response = admin_client.post(
        DEAD,
        {"action": "delete", "_selected_action": [d.pk for d in dead], "index": 0, "post": "yes"},
    )
    [text] = messages_text(response)
    first = ", ".join(f"#{d.pk}" for d in dead[:10])
    assert text == f"Deleted 12 dead letters: {first} and 2 more."
    assert "<a " not in str(list(response.wsgi_request._messages)[0])


def test_named_ids_stay_bounded():
    class Admin:
        admin_site = type("Site", (), {"name": "admin"})()

        def page_url(self, suffix, *args, model_name=None):
            return reverse(f"admin:django_pgjobs_{model_name}_{suffix}", args=args)

    ids = list(range(1, 1001))
    message = confirm.rows_touched(Admin(), "Requeued 1,000 jobs.", ids, "job")
    assert message.count("<a ") == confirm.NAMED_IDS + 1
    assert "and 990 more" in message and "list the first 200" in message
    assert f'id__in={",".join(map(str, ids[: confirm.LINKED_IDS]))}"' in message
