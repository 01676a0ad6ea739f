"""Two operators at once: requeue and delete stay atomic (real connections, real threads).

A third connection holds the dead letters' row locks while both operators' requests start, so
both statements are certainly in flight together; then it lets go and they race for real.
"""

from __future__ import annotations

import threading

import pytest
from admin_data import dead_letter, superuser  # noqa: F401
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
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query ILIKE '%pgjobs_deadletter%'"
    ).fetchone()[0]


def race(other_connection, user, ids: list[int], posts: list[tuple[str, dict]]) -> list:
    """Send ``posts`` from separate clients (threads, connections) while ``ids`` are locked."""
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
        other_connection.execute(
            "SELECT id FROM pgjobs_deadletter WHERE id = ANY(%s) FOR UPDATE", (ids,)
        )
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
    superuser,  # noqa: F811
):
    dead = dead_letter(args=["once"])
    url = reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"])
    race(other_connection, superuser, [dead.pk], [(url, {}), (url, {})])
    assert Job.objects.filter(args=["once"]).count() == 1
    assert not DeadLetter.objects.exists()


def test_overlapping_bulk_requeues_make_one_job_per_dead_letter(
    other_connection,
    superuser,  # noqa: F811
):
    a, b, c = (dead_letter(args=[name]) for name in "abc")
    posts = [
        (DEAD, {"action": "requeue", "_selected_action": [a.pk, b.pk]}),
        (DEAD, {"action": "requeue", "_selected_action": [b.pk, c.pk]}),
    ]
    race(other_connection, superuser, [a.pk, b.pk, c.pk], posts)
    assert sorted(arg for (arg,) in Job.objects.values_list("args", flat=True)) == ["a", "b", "c"]
    assert not DeadLetter.objects.exists()


def test_requeue_racing_delete_does_one_or_the_other(other_connection, superuser):  # noqa: F811
    dead = dead_letter(args=["either"])
    posts = [
        (reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "requeue"]), {}),
        (reverse("admin:django_pgjobs_deadletter_act", args=[dead.pk, "delete"]), {}),
    ]
    race(other_connection, superuser, [dead.pk], posts)
    assert not DeadLetter.objects.exists()
    assert Job.objects.filter(args=["either"]).count() <= 1
