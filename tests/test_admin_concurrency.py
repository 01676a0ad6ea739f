"""Two operators at once: requeue and delete stay atomic (real connections, real threads).

A third connection holds locks (the dead letters' rows, or a job's unique key it has not
committed yet) while the operators' requests start, so their statements are certainly in flight
together; then it lets go and they race for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from admin_data import dead_letter
from django.contrib.messages import get_messages
from django.db import connections
from django.test import Client
from django.urls import reverse
from helpers import wait_until

from django_pgjobs.models import DeadLetter, Job

pytestmark = pytest.mark.django_db(transaction=True)

DEAD = reverse("admin:django_pgjobs_deadletter_changelist")


def waiting_on_locks(conn) -> int:
    # Inside a transaction PostgreSQL keeps serving the first activity snapshot: clear it.
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' "
        "AND query ILIKE '%pgjobs_deadletter%'"
    ).fetchone()[0]


def lock_dead_letters(ids: list[int]) -> Callable:
    def hold(conn) -> None:
        conn.execute("SELECT id FROM pgjobs_deadletter WHERE id = ANY(%s) FOR UPDATE", (ids,))

    return hold


def race(other_connection, user, hold: Callable, posts: list[tuple[str, dict]]) -> list:
    """Send ``posts`` from separate clients (threads, connections) while ``hold`` (run in a
    transaction of ``other_connection``) keeps each of them waiting on a lock."""
    clients = []
    for _ in posts:
        client = Client()
        client.force_login(user)
        clients.append(client)
    results: list = [None] * len(posts)

    def send(index: int) -> None:
        try:
            url, data = posts[index]
            results[index] = clients[index].post(url, data)
        finally:
            connections.close_all()

    with other_connection.transaction():
        hold(other_connection)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(posts))]
        for thread in threads:
            thread.start()
        wait_until(lambda: waiting_on_locks(other_connection) >= len(posts), timeout=30)
    for thread in threads:
        thread.join(30)
    assert all(r is not None and r.status_code == 302 for r in results), results
    return results


def test_two_operators_requeueing_the_same_dead_letter_make_one_job(
    other_connection,
    superuser,
):
    dead = dead_letter(args=["once"])
    url = reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"])
    race(other_connection, superuser, lock_dead_letters([dead.pk]), [(url, {}), (url, {})])
    assert Job.objects.filter(args=["once"]).count() == 1
    assert not DeadLetter.objects.exists()


def test_overlapping_bulk_requeues_make_one_job_per_dead_letter(
    other_connection,
    superuser,
):
    a, b, c = (dead_letter(args=[name]) for name in "abc")
    posts = [
        (DEAD, {"action": "requeue", "_selected_action": [a.pk, b.pk]}),
        (DEAD, {"action": "requeue", "_selected_action": [b.pk, c.pk]}),
    ]
    race(other_connection, superuser, lock_dead_letters([a.pk, b.pk, c.pk]), posts)
    assert sorted(arg for (arg,) in Job.objects.values_list("args", flat=True)) == ["a", "b", "c"]
    assert not DeadLetter.objects.exists()


CONFIRMED = {"confirmed": "yes"}  # the answer of the confirmation page of "Delete for good"


def test_requeue_racing_delete_does_one_or_the_other(other_connection, superuser):
    dead = dead_letter(args=["either"])
    posts = [
        (reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"]), {}),
        (reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "delete"]), CONFIRMED),
    ]
    race(other_connection, superuser, lock_dead_letters([dead.pk]), posts)
    assert not DeadLetter.objects.exists()
    assert Job.objects.filter(args=["either"]).count() <= 1


def test_requeues_of_two_dead_letters_sharing_a_unique_key_make_one_job(
    other_connection,
    superuser,
):
    # Each statement finds the key free and inserts; the second insert fails on the unique index
    # once the first commits, and runs again, leaving its dead letter in place.
    a, b = (dead_letter(unique_key="order:9", args=[name]) for name in "ab")
    posts = [
        (reverse("admin:django_pgjobs_deadletter_act", args=[d.pk, "requeue"]), {}) for d in (a, b)
    ]
    race(other_connection, superuser, lock_dead_letters([a.pk, b.pk]), posts)
    assert Job.objects.filter(unique_key="order:9").count() == 1
    assert DeadLetter.objects.count() == 1  # never gone without its job


def test_requeue_racing_an_enqueue_of_the_same_unique_key_leaves_the_dead_letter(
    other_connection,
    superuser,
):
    dead = dead_letter(unique_key="order:10", args=["dead"])

    def enqueue_uncommitted(conn) -> None:
        conn.execute(
            "INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, "
            "attempts, max_attempts, unique_key, created_at, worker, errors) VALUES "
            "('testproject.demo.jobs.record', 'default', 0, '[\"fresh\"]', '{}', 'ready', now(), "
            "0, 3, 'order:10', now(), '', '[]')"
        )

    url = reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"])
    (response,) = race(other_connection, superuser, enqueue_uncommitted, [(url, {})])
    assert list(Job.objects.values_list("args", flat=True)) == [["fresh"]]
    assert DeadLetter.objects.filter(pk=dead.pk).exists()
    assert "was left alone" in str(list(get_messages(response.wsgi_request))[0])
