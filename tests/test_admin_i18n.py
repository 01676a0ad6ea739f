"""The admin in another language: the German catalogue shipped in django_pgjobs/locale, chosen
as a user's browser chooses it (Accept-Language, through the testproject's LocaleMiddleware).

Every page of the admin is rendered in German and its visible text (and its tooltips and button
labels) searched for English words of the admin's own: a string left unmarked for translation,
or translated once at import time (``gettext`` where ``gettext_lazy`` was needed), fails it.
The catalogue itself is checked against the strings ``makemessages`` finds (when GNU gettext is
installed: required in CI through ``PGJOBS_REQUIRE_GETTEXT=1``).
"""

from __future__ import annotations

import gettext
import os
import re
import shutil
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from admin_data import dead_letter, error, job
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone, translation

import django_pgjobs
from django_pgjobs.models import (
    Job,
    OutboxDeadLetter,
    OutboxEvent,
    QueueStat,
    QueueState,
    Repair,
    Schedule,
    Worker,
    Workflow,
)

GERMAN = {"HTTP_ACCEPT_LANGUAGE": "de"}
CATALOGUE = Path(django_pgjobs.__file__).parent / "locale" / "de" / "LC_MESSAGES"

#: English words of the admin's own texts, none of them a German word: any of them on a German
#: page is a string left in English. (Not "die", "was", "in", "an", "so", "per", "name",
#: "pause", "rate", "status", "worker", "workflow", "dashboard", "dead letter", "host"...: German
#: words, or the English terms the German catalogue keeps; nor "aborted", the error type
#: ``Aborted`` that German sentences name too.)
ENGLISH = frozenset(
    """
    the of and or no not by with to for is are this here only more all none first take back
    job jobs queue queues selected attempt attempts running scheduled retrying due successful
    ready blocked cancelled error errors alive silent yes last seen up age state step steps
    paused resume created finished started succeeded failed lettered enqueued requeue requeued
    replay delete deleted cancel abort timeline when what result progress arguments
    timing repairs failure reason died within hour hours days ago now lease leases expired until
    priority edit check second schedule schedules next run runs outcome recent kept value return
    show shown home type latest took current group measured table rows wait backlog oldest done
    trail audit metadata time active source key unique waiting topic event events available
    claimed concurrency list them cannot undone never
    """.split()
)


HIDDEN = ("script", "style", "code", "pre")


class VisibleText(HTMLParser):
    """The text a user reads on a page: text outside <script> and <style>, and the title,
    aria-label, placeholder and alt attributes and the labels of buttons. Text in <code> and
    <pre> is left out: code and values (a job's signature, its arguments, a traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in HIDDEN:
            self.hidden += 1
        for name in ("title", "aria-label", "placeholder", "alt"):
            if attributes.get(name):
                self.texts.append(attributes[name])
        if tag == "input" and attributes.get("type") in ("submit", "button"):
            self.texts.append(attributes.get("value") or "")

    def handle_endtag(self, tag):
        if tag in HIDDEN:
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden and data.strip():
            self.texts.append(data)


def english_left(page: str) -> list[str]:
    """The texts of ``page`` holding an English word of ``ENGLISH``. Words joined by dots,
    underscores, colons or slashes (job names, URLs, ids) are names, not words."""
    parser = VisibleText()
    parser.feed(page)
    found = []
    for text in parser.texts:
        for token in text.split():
            if re.search(r"[._:/=#@]", token.strip(".,:;()\"'?!…")):
                continue
            if any(word.lower() in ENGLISH for word in re.findall(r"[^\W\d_]+", token)):
                found.append(" ".join(text.split()))
                break
    return found


def german(client, url: str, headers: bool = True, **post) -> str:
    """``url`` as a German browser gets it (or, ``headers=False``, a browser asking for no
    language): a POST when ``post`` holds its fields."""
    extra = GERMAN if headers else {}
    response = client.post(url, post, **extra) if post else client.get(url, **extra)
    assert response.status_code == 200, (url, response.status_code)
    assert '<html lang="de"' in response.content.decode()
    return response.content.decode()


@pytest.fixture
def rows(db):
    """A row in every state the admin shows, with data of no language ("x1", "q1"): only the
    admin's own words can be English."""
    now = timezone.now()
    flow = Workflow.objects.create(name="wf1", step=0, remaining=1, sizes=[2, 1], created_at=now)
    made = {
        "due": job(queue="q1", args=[1], run_after=now - timedelta(seconds=30)),
        "scheduled": job(queue="q1", args=[2], run_after=now + timedelta(hours=1)),
        "retrying": job(
            queue="q1",
            attempts=1,
            run_after=now + timedelta(seconds=45),
            errors=[{**error(1, "ValueError", "x1", "record", 2), "traceback": "Tb"}],
        ),
        "running": job(
            queue="q2",
            status="running",
            attempts=1,
            started_at=now - timedelta(seconds=20),
            lease_expires_at=now + timedelta(seconds=40),
            worker="w1",
            progress={"done": 3, "total": 10, "note": "", "at": now.isoformat()},
            metadata={"k": 1},
        ),
        "stuck": job(
            queue="q2",
            status="running",
            attempts=1,
            priority=5,
            started_at=now - timedelta(minutes=5),
            lease_expires_at=now - timedelta(minutes=3),
            worker="w2",
        ),
        "kept": job(
            status="successful",
            attempts=1,
            keep_result=True,
            result={"v": 1},
            started_at=now - timedelta(seconds=3),
            finished_at=now,
        ),
        "step": job(queue="q1", workflow=flow, workflow_step=0, workflow_member=0),
        "dead": dead_letter(
            queue="q1",
            reason="x2",
            errors=[{**error(1, "ValueError", "x3", "always_fails", 5), "traceback": "Tb"}],
        ),
        "workflow": flow,
    }
    dead_letter(queue="q1", reason="x4", error_type="", workflow_id=flow.pk, workflow_step=0)
    Worker.objects.create(id="w1", hostname="h1", pid=1, queues=[], concurrency=2)
    Worker.objects.create(
        id="w2",
        hostname="h2",
        pid=2,
        queues=["zz"],
        concurrency=1,
        last_seen_at=now - timedelta(minutes=5),
    )
    QueueState.objects.create(name="q1", paused=True)
    minute = now.replace(second=0, microsecond=0)
    QueueStat.objects.bulk_create(
        QueueStat(queue="q1", minute=minute - timedelta(minutes=m), succeeded=4, retried=1)
        for m in range(3)
    )
    made["schedule"] = Schedule.objects.create(
        name="s1", job_name="testproject.demo.jobs.noop", cron="0 3 * * *", next_fire_at=now
    )
    Schedule.objects.create(name="s2", job_name="x.y", cron="0 3 * * *", paused=True)
    event = OutboxEvent.objects.create(topic="t1", key="k1", payload={})
    OutboxDeadLetter.objects.create(
        id=event.pk + 1000, topic="t2", payload={}, created_at=now, error="e1"
    )
    made["repair"] = Repair.objects.create(
        repaired_by="x5", name="x.y", queue="q1", dead_letter_id=1, job_id=1, requeued_as=2,
        reason="x6", args_before=[1], args=[2],
    )  # fmt: skip
    return made


def admin_url(model: str, page: str = "changelist", *args) -> str:
    return reverse(f"admin:django_pgjobs_{model}_{page}", args=args)


def pages(rows) -> list[str]:
    """Every page of the admin, each list in each of its views."""
    jobs = admin_url("job")
    return [
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_pgjobs"]),
        admin_url("job", "dashboard"),
        jobs,
        *(f"{jobs}?view={view}" for view in ("due", "scheduled", "retrying", "running")),
        f"{jobs}?view=successful",
        f"{jobs}?view=lease_expired",
        *(admin_url("job", "change", rows[k].pk) for k in ("retrying", "running", "kept", "step")),
        admin_url("deadletter"),
        admin_url("deadletter", "change", rows["dead"].pk),
        admin_url("deadletter", "summary"),
        admin_url("deadletter", "edit", rows["dead"].pk),
        admin_url("queuestate"),
        admin_url("worker"),
        admin_url("worker", "change", "w1"),
        admin_url("schedule"),
        admin_url("schedule", "add"),
        admin_url("schedule", "change", rows["schedule"].pk),
        admin_url("workflow"),
        admin_url("workflow", "change", rows["workflow"].pk),
        admin_url("outboxevent"),
        admin_url("outboxdeadletter"),
        admin_url("repair"),
        admin_url("repair", "change", rows["repair"].pk),
    ]


def test_every_admin_page_is_german_for_a_german_browser(admin_client, rows):
    left = {}
    for url in pages(rows):
        found = english_left(german(admin_client, url))
        if found:
            left[url] = found
    # the pages that answer a POST: the confirmations of actions, the replay form
    for url, action, pk in (
        (admin_url("deadletter"), "delete", rows["dead"].pk),
        (admin_url("deadletter"), "replay_over_time", rows["dead"].pk),
        (admin_url("job"), "abort", rows["running"].pk),
    ):
        page = german(admin_client, url, action=action, _selected_action=[pk], rate="x")
        if found := english_left(page):
            left[action] = found
    assert not left, f"English left on German pages: {left}"


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def test_every_message_after_an_action_is_german(admin_client, rows):
    edit = admin_url("deadletter", "edit", rows["dead"].pk)
    refused = german(admin_client, edit, args="{}", kwargs="{}")  # the form again, and why
    assert "args muss ein JSON-Array [...] sein, nicht dict" in refused
    assert "ist kein gültiges JSON" in german(admin_client, edit, args="[", kwargs="{}")
    post = admin_client.post
    queue = {"queue": "q1"}
    responses = [
        post(admin_url("queuestate", "resume"), queue, **GERMAN),
        post(admin_url("queuestate", "pause"), queue, **GERMAN),
        post(admin_url("queuestate"), {"action": "resume", "_selected_action": ["q1"]}, **GERMAN),
        post(admin_url("job", "act", rows["scheduled"].pk, "run_now"), **GERMAN),
        post(admin_url("job", "act", rows["due"].pk, "retry_now"), **GERMAN),  # not retrying
        post(admin_url("job", "act", 999999, "run_now"), **GERMAN),  # gone
        post(
            admin_url("job"),
            {"action": "retry_now", "_selected_action": [rows["retrying"].pk, rows["due"].pk]},
            **GERMAN,
        ),
        post(
            admin_url("deadletter"),
            {"action": "replay_over_time", "_selected_action": [rows["dead"].pk], "rate": "2"},
            **GERMAN,
        ),
        post(admin_url("deadletter", "act", rows["dead"].pk, "requeue"), **GERMAN),  # gone now
        post(admin_url("workflow", "abort", rows["workflow"].pk), **GERMAN),
        post(admin_url("workflow", "abort", rows["workflow"].pk), **GERMAN),  # finished now
        post(
            admin_url("workflow"),
            {"action": "abort_selected", "_selected_action": [rows["workflow"].pk]},
            **GERMAN,
        ),
    ]
    schedules = [rows["schedule"].pk, Schedule.objects.get(name="s2").pk]
    for action in ("pause", "resume", "run_now"):
        selected = {"action": action, "_selected_action": schedules}
        responses.append(post(admin_url("schedule"), selected, **GERMAN))
    messages = said(responses[-1])  # those of every response: no page showed them yet
    assert len(messages) == len(responses) + 1  # run now: one message per schedule
    left = [found for text in messages for found in english_left(text)]
    assert not left, f"English left in messages: {left}"
    assert "Warteschlange q1 angehalten." in messages
    assert f"Workflow #{rows['workflow'].pk} war bereits beendet." in messages


def test_german_pages_say_what_the_english_ones_say(admin_client, rows):
    page = german(admin_client, admin_url("job"))
    assert "Nach Auftragsname" in page and "Letzter Fehler" in page  # a filter, a column
    assert "Ausgewählte geplante Aufträge jetzt ausführen" in page  # an action
    assert ">fällig<" in page and ">in Wiederholung<" in page  # the views' badges
    dashboard = german(admin_client, admin_url("job", "dashboard"))
    assert "Warteschlangen" in dashboard and "aktive Worker" in dashboard
    assert "Fortsetzen" in dashboard  # q1 is paused
    assert "vor 30 min" in dashboard  # the chart's axis
    detail = german(admin_client, admin_url("job", "change", rows["retrying"].pk))
    assert "Zeitleiste" in detail and "Versuch 1 fehlgeschlagen" in detail
    # a list action that asks first, then its message
    asked = {"action": "cancel", "_selected_action": [rows["due"].pk, rows["running"].pk]}
    confirm = german(admin_client, admin_url("job"), **asked)
    assert "Auftrag stornieren: 1 Auftrag?" in confirm
    assert "Das kann nicht rückgängig gemacht werden." in confirm
    assert "Nein, bitte abbrechen" in confirm
    response = admin_client.post(admin_url("job"), {**asked, "post": "yes"}, **GERMAN)
    [message] = said(response)
    assert message.startswith("1 Auftrag storniert: #")
    assert "1 ausgewählter Auftrag blieb unverändert" in message
    assert not Job.objects.filter(pk=rows["due"].pk).exists()


def test_english_stays_the_default_and_language_code_sets_another(admin_client, rows):
    dashboard = admin_url("job", "dashboard")
    page = admin_client.get(dashboard).content.decode()
    assert "workers alive" in page and "aktive Worker" not in page
    with override_settings(LANGUAGE_CODE="de"):  # a project all in German, no header needed
        assert "aktive Worker" in german(admin_client, dashboard, headers=False)
    with translation.override("de"):
        assert str(Job._meta.verbose_name_plural) == "Aufträge"


def test_english_left_finds_an_english_word():
    # the check itself: an untranslated sentence, a tooltip and a button are found; names not
    assert english_left("<p>Keine <b>queue</b> hier</p>") == ["queue"]
    assert english_left('<th title="Jobs of the hour">x</th>') == ["Jobs of the hour"]
    assert english_left('<input type="submit" value="Requeue">') == ["Requeue"]
    assert english_left("<td>testproject.demo.jobs.record, q1 <code>the job</code></td>") == []
    assert english_left("<p>höhere, vollständig</p>") == []  # "here" is no word of "höhere"


def catalogue_msgids(po_text: str) -> set[str]:
    """The msgids of a .po file's entries (not its header; plural ones by their singular)."""
    ids, current = set(), None
    for line in po_text.splitlines() + [""]:
        if line.startswith("msgid "):
            current = [line[6:]]
        elif current is not None and line.startswith('"'):
            current.append(line)
        elif current is not None:
            text = "".join(part.strip()[1:-1] for part in current)
            if text:
                ids.add(text.encode().decode("unicode_escape").encode("latin-1").decode())
            current = None
    return ids


def test_the_compiled_catalogue_translates_every_string_of_the_po_file():
    with open(CATALOGUE / "django.mo", "rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)
    translated = {key[0] if isinstance(key, tuple) else key for key in catalogue._catalog}
    missing = catalogue_msgids((CATALOGUE / "django.po").read_text(encoding="utf-8"))
    missing -= translated
    assert not missing, f"compile the catalogue again (docs/howto/developing.md): {missing}"
    assert all(text for key, text in catalogue._catalog.items() if key)  # none left empty


def test_the_catalogue_holds_every_string_marked_for_translation(tmp_path, monkeypatch):
    """``makemessages`` run on a copy of the package finds no string the shipped catalogue
    lacks, and the catalogue holds none it would drop."""
    if not (shutil.which("xgettext") and shutil.which("msgmerge")):
        if os.environ.get("PGJOBS_REQUIRE_GETTEXT") == "1":
            pytest.fail("PGJOBS_REQUIRE_GETTEXT=1 but GNU gettext is missing", pytrace=False)
        pytest.skip("GNU gettext (xgettext, msgmerge) is not installed")
    package = Path(django_pgjobs.__file__).parent
    copy = tmp_path / "django_pgjobs"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    monkeypatch.chdir(copy)
    call_command("makemessages", locale=["de"], no_location=True, no_obsolete=True, verbosity=0)
    fresh = (copy / "locale/de/LC_MESSAGES/django.po").read_text(encoding="utf-8")
    shipped = (package / "locale/de/LC_MESSAGES/django.po").read_text(encoding="utf-8")
    assert catalogue_msgids(fresh) == catalogue_msgids(shipped)
    untranslated = re.findall(r'\nmsgid "(.+)"\nmsgstr ""\n\n', fresh)
    assert not untranslated, f"strings without a German translation: {untranslated}"
    assert "#, fuzzy\nmsgid" not in fresh.split("\n\n", 1)[1], "a fuzzy (guessed) translation"


def test_the_package_data_ships_the_catalogue():
    """pyproject.toml's package data names the catalogue, so a pip-installed package has it."""
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    patterns = re.search(r"^django_pgjobs = \[(.*)\]$", pyproject, re.M).group(1)
    package = Path(django_pgjobs.__file__).parent
    shipped = {
        path for pattern in re.findall(r'"([^"]+)"', patterns) for path in package.glob(pattern)
    }
    assert {CATALOGUE / "django.po", CATALOGUE / "django.mo"} <= shipped
