"""Flow control in the claim (docs/howto/flow-control.md): per-key concurrency, rate limits and
fair sharing, with real ``runjobs`` processes against real PostgreSQL. Each job records its
start and end (Execution rows, clock of one machine), from which the limits are checked."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from helpers import FAST_LEASES, wait_until

from django_pgjobs import chain, job, operations
from django_pgjobs.conf import ConfigError, get_config
from django_pgjobs.flow import prune_flow_keys
from django_pgjobs.models import DeadLetter, FlowKey, Job
from django_pgjobs.testing import run_jobs
from testproject.demo.models import Execution
from testproject.handlers import flow

pytestmark = pytest.mark.django_db(transaction=True)


def intervals() -> dict[str, list[tuple[int, float, float]]]:
    """Per key: (step, start, end) of each job, in start order."""
    marks: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for label, at in Execution.objects.values_list("label", "at"):
        edge, key, step = label.split(":")
        marks[(key, int(step))][edge] = at.timestamp()
    by_key: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for (key, step), edges in marks.items():
        by_key[key].append((step, edges["start"], edges["end"]))
    return {key: sorted(runs, key=lambda run: run[1]) for key, runs in by_key.items()}


def most_at_once(runs: list[tuple[int, float, float]]) -> int:
    events = sorted([(start, 1) for _, start, _ in runs] + [(end, -1) for _, _, end in runs])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_four_workers_never_run_two_jobs_of_a_key_at_once_and_keep_fifo(start_worker):
    for step in range(10):
        for order in range(4):
            flow.sync_order.using(concurrency_key=f"order:{order}").enqueue(order, step, 0.05)
    workers = [start_worker("--concurrency", "4") for _ in range(4)]
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.output()
    runs = intervals()
    assert sorted(runs) == ["0", "1", "2", "3"] and all(len(r) == 10 for r in runs.values())
    for key, key_runs in runs.items():
        assert most_at_once(key_runs) == 1, f"order {key} ran two jobs at once: {key_runs}"
        assert [step for step, _, _ in key_runs] == list(range(10)), f"order {key} not FIFO"


def test_a_limit_of_two_reaches_two(start_worker):
    flow.export_account.enqueue_many([((7, part, 0.4), {}) for part in range(8)])
    worker = start_worker("--concurrency", "4")
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert most_at_once(intervals()["7"]) == 2


def test_a_sigkilled_workers_key_slot_comes_back_with_its_lease(start_worker):
    flow.sync_order.using(concurrency_key="order:9").enqueue(9, 0, 30)
    flow.sync_order.using(concurrency_key="order:9").enqueue(9, 1, 0)
    victim = start_worker("--concurrency", "2", env=FAST_LEASES)
    wait_until(lambda: Execution.objects.filter(label="start:9:0").exists(), timeout=30)
    time.sleep(0.3)
    assert not Execution.objects.filter(label="start:9:1").exists()  # the key's slot is taken
    victim.kill()
    survivor = start_worker("--concurrency", "2", env=FAST_LEASES)
    # the rescue frees the slot and puts the first job back, due now: behind the second (FIFO by
    # due time), which runs, then the first again (its second attempt), alone
    wait_until(lambda: Execution.objects.filter(label="start:9:0").count() == 2, timeout=60)
    survivor.kill()
    (end_of_second,) = Execution.objects.filter(label="end:9:1").values_list("at", flat=True)
    first_starts = Execution.objects.filter(label="start:9:0").order_by("at")
    assert first_starts[1].attempt == 2 and first_starts[1].at >= end_of_second


def test_run_jobs_respects_the_key_and_counts_slots_from_running_rows():
    for step in range(3):
        flow.sync_order.using(concurrency_key="order:1").enqueue(1, step)
    assert run_jobs().succeeded == 3
    assert [step for step, _, _ in intervals()["1"]] == [0, 1, 2]
    key = FlowKey.objects.get(key="key:order:1")
    assert key.concurrency_limit == 1 and key.ready_at is None


@pytest.mark.long
@pytest.mark.alone  # beside other tests, on a machine with slow commits, its workers were starved
def test_a_rate_limit_of_20_a_second_holds_across_three_workers(start_worker):
    flow.call_partner.enqueue_many([(n,) for n in range(200)])
    workers = [start_worker("--concurrency", "4") for _ in range(3)]
    wait_until(lambda: not Job.objects.exists(), timeout=60)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    # the times the claims took the jobs (their started_at, the database's clock)
    labels = Execution.objects.values_list("label", flat=True)
    claimed = sorted(float(label.split("@")[1]) for label in labels)
    assert len(claimed) == 200
    # any one-second window: at most 20 plus the bucket's burst (a tenth of a second's worth, 2)
    busiest = max(sum(1 for t in claimed[i:] if t < at + 1.0) for i, at in enumerate(claimed))
    assert busiest <= 20 + 2, f"{busiest} calls claimed in one second"
    took = claimed[-1] - claimed[0]
    # never faster than 20/s over the whole run
    assert took >= 9.0, f"200 calls at 20/s took {took:.2f}s"
    # and not slower, but for the moments no worker asked: the bucket keeps a tenth of a
    # second's worth, so a second when every worker is starved (a loaded CI machine: 12.02 s
    # once, 11.6 s another time) is lost for good. So the typical second is checked, not the
    # total: the median of the one-second windows (every quarter second) holds 18 or more (a
    # limiter at 17/s fails it), and the whole run stays within twice the ideal time
    starts = [claimed[0] + 0.25 * n for n in range(int((took - 1.0) / 0.25) + 1)]
    windows = sorted(sum(1 for t in claimed if at <= t < at + 1.0) for at in starts)
    typical = windows[len(windows) // 2]
    assert typical >= 18, f"the median second held {typical} calls (all: {windows})"
    assert took <= 20.0, f"200 calls at 20/s took {took:.2f}s"


# ten partner APIs, each with a slow rate limit of its own (a bucket per job)
SLOW_PARTNERS = [
    job(name=f"flow_slow_partner_{n}", queue="flow", rate_limit="1/m")(lambda: None)
    for n in range(10)
]


def test_an_enqueue_makes_a_rate_limited_key_due_no_sooner_than_its_next_token():
    """A key whose bucket is empty gives nothing now. Made due by each enqueue to it, such keys
    took the lanes of the next flow claim: ten partner APIs at one call a minute took all eight,
    and a tenant's ready job waited. (Made due early all the same, by "Run now" or a requeue,
    such a key takes a lane once, and that claim moves it on to its next token.)"""
    claims = operations.ClaimBuilder(worker="test", queues=None, lease_seconds=60)
    for partner in SLOW_PARTNERS:
        partner.enqueue()
    assert len(operations.claim_jobs_flow(connection, claims.take(20), lanes=20).claimed) == 10
    partners = FlowKey.objects.filter(key__startswith="job:flow_slow_partner_")
    partners.update(last_served_at=None)  # first in line
    for partner in SLOW_PARTNERS:  # the next call of each waits a minute for its token
        partner.enqueue()
    assert partners.filter(ready_at__gt=timezone.now() + timedelta(seconds=50)).count() == 10
    flow.import_row.using(fairness_key="tenant:last").enqueue("last", 1)
    FlowKey.objects.exclude(key__startswith="job:").update(last_served_at=timezone.now())
    claimed = operations.claim_jobs_flow(connection, claims.take(10), lanes=8).claimed
    assert [job.args for job in claimed] == [["last", 1]]


def test_a_small_tenant_is_served_before_a_tenth_of_a_big_backlog(start_worker):
    with transaction.atomic():
        flow.import_row.using(fairness_key="tenant:big").enqueue_many(
            [("big", row) for row in range(5000)]
        )
    with transaction.atomic():
        flow.import_row.using(fairness_key="tenant:small").enqueue_many(
            [("small", row) for row in range(20)]
        )
    workers = [start_worker("--concurrency", "2") for _ in range(2)]
    wait_until(lambda: Execution.objects.filter(label__startswith="small:").count() == 20, 60)
    for worker in workers:
        worker.kill()
    last_small = Execution.objects.filter(label__startswith="small:").order_by("-at")[0].at
    big_before = Execution.objects.filter(label__startswith="big:", at__lt=last_small).count()
    assert big_before < 500, f"{big_before} big jobs ran before the small tenant's 20"


def test_a_scheduled_job_of_a_key_never_stalls_its_ready_jobs_and_runs_when_made_due():
    later = flow.sync_order.using(concurrency_key="order:5", delay=3600).enqueue(5, 0)
    flow.sync_order.using(concurrency_key="order:5").enqueue(5, 1)
    assert run_jobs().succeeded == 1  # the ready one, past the scheduled one ahead of it
    assert Job.objects.filter(pk=later.pk, status="ready").exists()
    assert run_jobs(with_scheduled=True).succeeded == 1  # "Run now" tells its key
    assert [step for step, _, _ in intervals()["5"]] == [1, 0]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"concurrency_limit": 0}, "concurrency_limit must be between 1 and 10,000, not 0"),
        ({"concurrency_limit": "2"}, "concurrency_limit must be an int"),
        ({"rate_limit": "20/x"}, "rate_limit must be a number of jobs greater than 0 per"),
        ({"rate_limit": "0/s"}, "written like '20/s', '100/m' or '1000/h', not '0/s'"),
    ],
)
def test_bad_limits_are_refused_at_decoration(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        job(name="flow_bad_limit", **options)(lambda: None)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: flow.sync_order.using(concurrency_key="k" * 201), "at most 200 characters"),
        (lambda: flow.sync_order.using(fairness_key=""), "fairness_key must be a non-empty"),
        (
            lambda: flow.export_account.using(fairness_key="tenant:1").enqueue(1, 1),
            "a fairness_key applies to jobs without concurrency_limit",
        ),
        (
            lambda: flow.call_partner.using(concurrency_key="partner").enqueue(1),
            "a job with rate_limit (one bucket for all its calls) takes no concurrency_key",
        ),
    ],
)
def test_keys_that_cannot_apply_are_refused_at_enqueue(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
    assert not Job.objects.exists()


def test_a_queue_rate_limit_is_checked_and_keys_its_jobs(settings):
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_RATE_LIMITS": {"flow": "often"}}
    with pytest.raises(ConfigError, match="the rate limit of queue 'flow' must be a number"):
        get_config()
    settings.PGJOBS = {**settings.PGJOBS, "QUEUE_RATE_LIMITS": {"flow": "100/m"}}
    assert flow.import_row.enqueue("t", 1).flow_key == "queue:flow"
    key = FlowKey.objects.get(key="queue:flow")
    assert key.rate == pytest.approx(100 / 60) and key.burst == 1.0
    with pytest.raises(ValueError, match="queue 'flow' has a rate limit"):
        flow.import_row.using(fairness_key="tenant:1").enqueue("t", 2)


def test_the_admin_shows_keys_holding_slots_their_use_and_jobs_waiting_on_them(admin_client):
    for step in range(3):
        flow.sync_order.using(concurrency_key="order:3").enqueue(3, step)
    flow.call_partner.enqueue(1)
    Job.objects.filter(flow_key="key:order:3", args=[3, 0]).update(status="running")  # a slot
    page = admin_client.get("/admin/django_pgjobs/flowkey/?slots=held").content.decode()
    assert "key:order:3" in page and "job:" not in page  # the key holding a slot, alone
    assert "1 / 1" in page and ">2</a>" in page  # its slot used, its two jobs waiting
    page = admin_client.get("/admin/django_pgjobs/flowkey/").content.decode()
    assert "20/s (2.0 of 2 now)" in page  # the rate limit's use: a full bucket
    jobs = admin_client.get("/admin/django_pgjobs/job/?q=key:order:3").content.decode()
    assert jobs.count("waits on key") == 2


def test_a_key_marked_idle_while_its_job_was_being_enqueued_is_made_due_by_the_rescue():
    flow.sync_order.using(concurrency_key="order:8").enqueue(8, 0)
    # what a flow claim leaves when it ran while this enqueue had not committed yet
    FlowKey.objects.filter(key="key:order:8").update(ready_at=None)
    operations.rescue(connection)  # also what every worker runs at its rescue interval
    assert FlowKey.objects.get(key="key:order:8").ready_at is not None
    assert run_jobs().succeeded == 1


def test_a_key_made_due_later_than_its_ready_job_is_made_due_by_the_rescue():
    """A claim that could not see a job (its enqueue not committed yet, and the key already due:
    that enqueue did not write it) sets the key to its next visible job: a retry waiting 40
    minutes. The rescue makes it due again: now, or at a rate-limited key's next token; a key
    whose ready jobs are not due yet is left alone."""
    flow.sync_order.using(concurrency_key="order:9").enqueue(9, 0)
    flow.call_partner.enqueue(1)  # 20/s
    flow.sync_order.using(concurrency_key="order:10", delay=3600).enqueue(10, 0)
    later = timezone.now() + timedelta(minutes=40)
    FlowKey.objects.update(ready_at=later)
    refilled = timezone.now()
    FlowKey.objects.filter(key__contains="call_partner").update(tokens=0.5, refilled_at=refilled)
    operations.rescue(connection)
    after = timezone.now()
    keys = dict(FlowKey.objects.values_list("key", "ready_at"))
    assert keys["key:order:9"] <= after
    # half a token at 20/s: the next one 25 ms after the refill (or now, if that has passed)
    (partner,) = (at for key, at in keys.items() if "call_partner" in key)
    next_token = refilled + timedelta(seconds=0.025)
    assert next_token - timedelta(milliseconds=1) <= partner <= max(next_token, after)
    assert keys["key:order:10"] == later  # its job is due in an hour
    assert run_jobs().succeeded == 2


def test_a_workflow_step_with_flow_control_is_refused():
    with pytest.raises(ValueError, match="a workflow step takes no flow control yet"):
        chain(flow.sync_order.using(concurrency_key="order:1").s(1, 0)).enqueue()
    assert not Job.objects.exists()


def test_keys_idle_for_a_day_are_pruned_and_written_again_by_their_next_job():
    flow.sync_order.using(concurrency_key="order:4").enqueue(4, 0)
    flow.sync_order.using(concurrency_key="order:6").enqueue(6, 0)
    run_jobs()
    flow.sync_order.using(concurrency_key="order:6").enqueue(6, 1)  # waiting: its key is kept
    long_ago = timezone.now() - timedelta(days=2)
    FlowKey.objects.update(last_served_at=long_ago, refilled_at=long_ago)
    assert prune_flow_keys(connection) == 1
    assert list(FlowKey.objects.values_list("key", flat=True)) == ["key:order:6"]
    flow.sync_order.using(concurrency_key="order:4").enqueue(4, 1)
    assert FlowKey.objects.get(key="key:order:4").concurrency_limit == 1
    assert run_jobs().succeeded == 2


def test_a_key_whose_last_claim_this_snapshot_cannot_see_is_left_to_the_next_claim(
    other_connection,
):
    """What a claim meets when another claim of the key committed after its snapshot was taken:
    its count of running jobs would miss that claim's jobs, so it leaves the key alone."""
    flow.sync_order.using(concurrency_key="order:2").enqueue(2, 0)
    other_connection.execute("BEGIN")
    (xid,) = other_connection.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    FlowKey.objects.filter(key="key:order:2").update(claimed_xid=xid)  # "claimed" by it
    assert run_jobs().succeeded == 0  # in progress for this snapshot: not visible
    other_connection.execute("COMMIT")
    assert run_jobs().succeeded == 1


def test_a_requeued_dead_letter_keeps_its_key_even_once_the_key_was_pruned():
    flow.sync_order_once.using(concurrency_key="order:11").enqueue(11)
    assert run_jobs().dead_lettered == 1
    (dead,) = DeadLetter.objects.all()
    assert dead.flow_key == "key:order:11"
    FlowKey.objects.all().delete()  # idle for a day: pruned
    flow.sync_order.using(concurrency_key="order:11").enqueue(11, 0, 0.0)  # ahead of it
    FlowKey.objects.all().delete()
    operations.requeue_dead_letters(connection, [dead.id])
    requeued = Job.objects.get(name=flow.sync_order_once.name)
    assert requeued.flow_key == "key:order:11"
    key = FlowKey.objects.get(key="key:order:11")  # written again, one at a time
    assert key.concurrency_limit == 1 and key.ready_at is not None
    stats = run_jobs()
    assert stats.succeeded == 1 and stats.dead_lettered == 1


def test_a_key_with_a_job_out_stays_due_so_its_retry_or_rescue_is_seen_at_once():
    flow.import_row.using(fairness_key="tenant:1").enqueue("t", 1)
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    (taken,), _ = operations.claim_jobs_flow(connection, claims.take(10), lanes=10)
    assert operations.claim_jobs_flow(connection, claims.take(10), lanes=10).claimed == []
    # its job is out (running): it may come back ready (a retry, a rescue), so the key is due
    assert FlowKey.objects.get(key="fair:tenant:1").ready_at is not None
    operations.release_jobs(connection, [taken])  # back, unstarted
    assert run_jobs().succeeded == 1


def test_keys_of_a_paused_queue_first_in_line_leave_their_lanes_to_keys_that_can_give():
    """100 keys never served (first in line) whose jobs wait in a paused queue, and a key of a
    served queue behind them. A claim takes `lanes` keys (here 8): those that can give a job,
    not the first 8 due, which kept the others' jobs waiting for as long as the pause lasted."""
    for tenant in range(100):
        flow.import_row.using(queue="paused", fairness_key=f"p{tenant:03d}").enqueue("p", 1)
    operations.set_queue_paused(connection, "paused", True)
    flow.import_row.using(fairness_key="victim").enqueue("victim", 1)
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)

    claimed = operations.claim_jobs_flow(connection, claims.take(10), lanes=8).claimed

    assert [job.args for job in claimed] == [["victim", 1]]
    operations.set_queue_paused(connection, "paused", False)
    assert run_jobs().succeeded == 100


def test_keys_whose_jobs_all_run_leave_their_lanes_to_a_key_with_a_job_ready():
    """Twelve tenants each running a job with nothing more ready stay due (a job out may come
    back by retry or rescue), ahead of a tenant served since; they take no lane of a claim
    looking at 8 keys, which finds the tenant's new job at once, not when theirs end."""
    claims = operations.ClaimBuilder(worker="w", queues=None, lease_seconds=60)
    for tenant in range(12):
        flow.import_row.using(fairness_key=f"busy{tenant:02d}").enqueue("busy", tenant)
    running = operations.claim_jobs_flow(connection, claims.take(20), lanes=20).claimed
    assert len(running) == 12  # claimed, still running
    flow.import_row.using(fairness_key="late").enqueue("late", 1)
    assert run_jobs().succeeded == 1  # "late" served: last in line now
    flow.import_row.using(fairness_key="late").enqueue("late", 2)

    claimed = operations.claim_jobs_flow(connection, claims.take(10), lanes=8).claimed

    assert [job.args for job in claimed] == [["late", 2]]
