"""Users of each permission level and a realistic queue state for the admin tests, the browser
test and the screenshots."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.utils import timezone
from django.utils.html import strip_tags

from django_pgjobs.metrics import WAIT_BUCKET_BOUNDS
from django_pgjobs.models import (
    DeadLetter,
    FlowKey,
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

PASSWORD = "correct horse battery staple"
MODELS = ("job", "deadletter", "queuestate", "worker")

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/django_pgjobs/worker.py", line 318, in _execute
    definition.func(*job.args, **job.kwargs)
  File "/srv/app/shop/jobs.py", line 42, in {func}
    response = client.post(url, json=payload, timeout=10)
  File "/srv/app/.venv/lib/python3.12/site-packages/httpx/_client.py", line 1145, in post
    raise {error}("{message}")
{error}: {message}
"""


def make_user(username: str, *, staff: bool = True, perms: tuple[str, ...] = ()) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_pgjobs", codename=codename)
        )
    return user


def viewer_perms() -> tuple[str, ...]:
    return tuple(f"view_{m}" for m in MODELS)


@pytest.fixture
def superuser(db) -> User:
    return User.objects.create_superuser("root", "root@example.com", PASSWORD)


@pytest.fixture
def staff_no_perms(db) -> User:
    return make_user("staff")


@pytest.fixture
def viewer(db) -> User:
    return make_user("viewer", perms=viewer_perms())


def error(attempt: int, error_type: str, message: str, func: str, minutes_ago: float) -> dict:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return {
        "at": at.isoformat(),
        "attempt": attempt,
        "type": error_type,
        "message": message,
        "traceback": TRACEBACK.format(func=func, error=error_type, message=message),
        "worker": "web-1:4242:a1b2c3d4",
    }


def job(**fields) -> Job:
    fields.setdefault("name", "testproject.demo.jobs.record")
    fields.setdefault("queue", "default")
    return Job.objects.create(**fields)


def dead_letter(**fields) -> DeadLetter:
    now = timezone.now()
    fields.setdefault("job_id", random.randint(1000, 99999))
    fields.setdefault("name", "testproject.demo.jobs.always_fails")
    fields.setdefault("queue", "default")
    fields.setdefault("attempts", 3)
    fields.setdefault("max_attempts", 3)
    fields.setdefault("created_at", now - timedelta(hours=1))
    fields.setdefault("error_type", "ValueError")
    errors = fields.setdefault(
        "errors",
        [
            error(i, fields["error_type"], "boom", "always_fails", 30 - i)
            for i in range(1, fields["attempts"] + 1)
        ],
    )
    fields.setdefault(
        "reason",
        f"attempts exhausted ({fields['attempts']}/{fields['max_attempts']}): "
        f"{errors[-1]['type']}: {errors[-1]['message']}",
    )
    return DeadLetter.objects.create(**fields)


def seed(rng: random.Random | None = None) -> dict:
    """Jobs in every view across three queues, dead letters, two workers and an hour of
    statistics. Returns the interesting rows by role."""
    rng = rng or random.Random(7)
    now = timezone.now()
    rows: dict = {}
    for i in range(12):
        job(
            name="testproject.demo.jobs.send_welcome_email",
            queue="emails",
            args=[1000 + i],
            run_after=now - timedelta(seconds=5 + 20 * i),
            created_at=now - timedelta(seconds=8 + 20 * i),
        )
    for i in range(4):
        job(args=[f"report-{i}"], run_after=now + timedelta(hours=i + 1), created_at=now)
    rows["scheduled"] = job(
        name="testproject.demo.jobs.record",
        args=["nightly-report"],
        kwargs={"password": "hunter2", "sleep": 0},
        run_after=now + timedelta(hours=6),
    )
    rows["retrying"] = job(
        name="testproject.demo.jobs.flaky",
        queue="payments",
        args=["charge-42"],
        kwargs={"fail_times": 9},
        attempts=2,
        max_attempts=4,
        run_after=now + timedelta(seconds=45),
        created_at=now - timedelta(minutes=12),
        started_at=now - timedelta(minutes=1),
        errors=[
            error(1, "ConnectionError", "payment gateway timed out", "flaky", 11),
            error(2, "ConnectionError", "payment gateway timed out", "flaky", 1),
        ],
    )
    rows["running"] = job(
        name="testproject.demo.jobs.record",
        queue="payments",
        args=["settle"],
        status="running",
        attempts=1,
        started_at=now - timedelta(seconds=20),
        lease_expires_at=now + timedelta(seconds=40),
        worker="web-1:4242:a1b2c3d4",
    )
    rows["stuck"] = job(
        name="testproject.demo.jobs.record",
        queue="payments",
        args=["stuck"],
        status="running",
        attempts=1,
        started_at=now - timedelta(minutes=5),
        lease_expires_at=now - timedelta(minutes=3),
        worker="web-2:977:e5f6a7b8",
    )
    kinds = [
        ("ValueError", "testproject.demo.jobs.always_fails", "boom", "default", 0.2),
        ("ConnectionError", "testproject.demo.jobs.flaky", "gateway unreachable", "payments", 5),
        (
            "UnknownJob",
            "shop.jobs.old_export",
            "'shop.jobs.old_export' is not registered",
            "default",
            60,
        ),
    ]
    dead = []
    for index in range(9):
        error_type, name, message, queue, hours = kinds[index % 3]
        failed = now - timedelta(hours=hours * (1 + index // 3))
        dead.append(
            dead_letter(
                name=name,
                queue=queue,
                error_type=error_type,
                args=[index],
                failed_at=failed,
                created_at=failed - timedelta(minutes=30),
                errors=[
                    error(a, error_type, message, name.rsplit(".", 1)[-1], 60 * hours + 30 - a)
                    for a in (1, 2, 3)
                ],
            )
        )
    rows["dead"] = dead
    # the outbox: an event waiting for the relay and one the broker refused
    rows["event"] = OutboxEvent.objects.create(
        topic="orders.placed", key="order:1", payload={"order": 1}
    )
    OutboxDeadLetter.objects.create(
        id=rows["event"].id + 1000, topic="nowhere", payload={"order": 2},
        created_at=now - timedelta(minutes=5), error="no route",
    )  # fmt: skip
    Worker.objects.create(
        id="web-1:4242:a1b2c3d4",
        hostname="web-1",
        pid=4242,
        queues=[],
        concurrency=8,
        started_at=now - timedelta(hours=3),
        last_seen_at=now,
    )
    Worker.objects.create(
        id="web-2:977:e5f6a7b8",
        hostname="web-2",
        pid=977,
        queues=["payments"],
        concurrency=2,
        started_at=now - timedelta(hours=1),
        last_seen_at=now - timedelta(minutes=4),
    )
    QueueState.objects.create(name="payments", paused=False)
    # a workflow half way: its list and page have a row to show
    rows["workflow"] = Workflow.objects.create(
        name="resize x2 > zip", step=0, remaining=1, sizes=[2, 1], created_at=now
    )
    # a flow control key (its jobs: none here; the flow tests make their own)
    rows["flow_key"] = FlowKey.objects.create(
        key="key:order:42", concurrency_limit=1, refilled_at=now, ready_at=now
    )
    minute = now.replace(second=0, microsecond=0)
    stats = []
    for back in range(60):
        for queue, rate in (("emails", 40), ("default", 15), ("payments", 6)):
            buckets = [0] * (len(WAIT_BUCKET_BOUNDS) + 1)
            done = max(0, int(rate * (0.6 + 0.8 * rng.random())))
            for _ in range(done):
                buckets[min(int(rng.expovariate(0.6)), len(buckets) - 1)] += 1
            stats.append(
                QueueStat(
                    queue=queue,
                    minute=minute - timedelta(minutes=back),
                    succeeded=done,
                    retried=rng.randint(0, 2) if queue == "payments" else 0,
                    dead_lettered=1 if (queue == "default" and back % 17 == 0) else 0,
                    wait_buckets=buckets,
                )
            )
    QueueStat.objects.bulk_create(stats)
    rows["schedule"] = Schedule.objects.create(
        name="nightly cleanup",
        job_name="testproject.demo.jobs.noop",
        cron="0 3 * * *",
        next_fire_at=(now + timedelta(days=1)).replace(hour=3, minute=0, second=0, microsecond=0),
    )
    rows["repair"] = Repair.objects.create(  # an edited dead letter, its job since succeeded
        repaired_at=now - timedelta(hours=2),
        repaired_by="admin user 'root'",
        name="testproject.demo.jobs.always_fails",
        queue="default",
        dead_letter_id=99_001,
        job_id=99_002,
        requeued_as=99_003,
        error_type="ValueError",
        reason="attempts exhausted (3/3): ValueError: boom",
        args_before=["old"],
        args=["new"],
    )
    return rows


#: The ids an action's message names ("Requeued 2 jobs: #4, #5 (list them)."): ``said`` leaves
#: them out, for the tests that check the rest of the sentence.
TOUCHED_IDS = re.compile(
    r": #\d+(?:, #\d+)*(?: and [\d,]+ more)?(?: \(list (?:them|the first [\d,]+)\))?(?=\.)"
)


def messages_text(response) -> list[str]:
    """The messages stored so far (a redirect that was not followed leaves them for the next
    page), as plain text."""
    return [strip_tags(str(message)) for message in get_messages(response.wsgi_request)]


def said(response) -> list[str]:
    """``messages_text`` without the ids an action names: "Requeued 2 jobs." """
    return [TOUCHED_IDS.sub("", text) for text in messages_text(response)]
