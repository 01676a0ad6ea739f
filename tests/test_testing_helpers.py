"""django_pgjobs.testing: the helpers users test their own jobs with."""

import pytest

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
