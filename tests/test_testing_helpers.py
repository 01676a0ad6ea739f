"""django_pgjobs.testing: the helpers users test their own jobs with."""

import pytest
from django.utils import timezone
from helpers import registered_for_the_test

from django_pgjobs import job, registry
from django_pgjobs.cron import Cron
from django_pgjobs.models import Schedule
from django_pgjobs.testing import assert_enqueued, enqueued, run_jobs
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_assert_enqueued_and_run_jobs():
    demo.record.enqueue("a", sleep=0)
    demo.record.using(queue="other").enqueue("b")
    job = assert_enqueued(demo.record, "a", sleep=0)
    assert job.args == ["a"]
    with pytest.raises(AssertionError, match="not enqueued"):
        assert_enqueued(demo.record, "zzz")
    assert [j.args for j in enqueued(queue="other")] == [["b"]]
    stats = run_jobs(["default"])
    assert stats.succeeded == 1
    assert list(Execution.objects.values_list("label", flat=True)) == ["a"]
    assert run_jobs().succeeded == 1
    assert enqueued() == []


def _every_minute(label: str) -> None:
    demo.record(label)


def test_run_jobs_runs_only_what_the_test_enqueued_unless_asked_for_the_schedules():
    """A project declaring @job(cron=...): run_jobs() writes no schedule row and fires no
    recurring job (a minute boundary during a test would add a run); with_schedules=True
    fires them as a worker does."""
    declared = job(name="tests.every_minute", cron=Cron("* * * * *", args=("tick",)))(_every_minute)
    registry._REGISTRY.pop(declared.name, None)
    with registered_for_the_test(declared):
        Schedule.objects.create(
            name="due",
            job_name=demo.record.name,
            cron="* * * * *",
            args=["due"],
            next_fire_at=timezone.now().replace(second=0, microsecond=0),  # a minute passed
        )
        assert run_jobs().succeeded == 0
        assert list(Schedule.objects.values_list("name", flat=True)) == ["due"]
        assert run_jobs(with_schedules=True).succeeded == 1
        assert set(Schedule.objects.values_list("name", flat=True)) == {"due", declared.name}
    assert list(Execution.objects.values_list("label", flat=True)) == ["due"]
