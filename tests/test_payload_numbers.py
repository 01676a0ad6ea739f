"""Numbers in job arguments read back unchanged, through PostgreSQL's jsonb and a real worker.

jsonb keeps numbers as numeric: what ``json`` writes in exponent form from 1e16 comes back as an
int, and numeric has no negative zero. The first are written in full, the second is refused.
"""

from __future__ import annotations

import sys

import pytest
from django.db import connection

from django_pgjobs import enqueue, enqueue_many, operations
from django_pgjobs.models import DeadLetter, Job
from django_pgjobs.payload import ArgumentsNotJSON
from testproject.demo import jobs as demo
from testproject.demo.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

NUMBERS = [
    0.0,
    0.1,
    1e-7,
    5e-324,  # the smallest subnormal
    2.2250738585072014e-308,
    123456789.12345679,
    1e15,
    9007199254740992.0,  # 2**53
    9999999999999998.0,  # the largest float json writes without an exponent
    1e16,
    -1e16,
    1.0000000000000002e16,
    1e22,
    1.5e300,
    sys.float_info.max,
    -sys.float_info.max,
    2**53 + 1,  # an int past float precision stays an int
    -(2**63),
    10**100,
    int("9" * 4000),
    0,
    True,
]


def reprs(values) -> list[str]:
    return [repr(value) for value in values]


def test_numbers_read_back_with_the_same_type_and_value_through_every_enqueue():
    jobs = [
        demo.compare_numbers.enqueue("enqueue", NUMBERS, reprs(NUMBERS)),
        enqueue("testproject.demo.jobs.compare_numbers", "by name", NUMBERS, reprs(NUMBERS)),
        demo.compare_numbers.using(priority=5, delay=0).enqueue(
            "using", NUMBERS, reprs(NUMBERS), big=1e16, small=5e-324
        ),
        *enqueue_many(
            demo.compare_numbers,
            [(("many", NUMBERS, reprs(NUMBERS)), {"nested": 1.5e300})],
        ),
    ]
    for enqueued in jobs:
        stored = Job.objects.get(pk=enqueued.pk)
        assert reprs(stored.args[1]) == reprs(NUMBERS)
        assert reprs(stored.kwargs.values()) == reprs(enqueued.kwargs.values())


def test_nested_large_floats_keep_their_place_and_type():
    nested = {"prices": [1.0, 2e16, {"deep": [-3.5e20, "1e16", 4]}], "name": 'x"y'}
    enqueued = demo.compare_numbers.enqueue("nested", [nested], [repr(nested)])
    assert Job.objects.get(pk=enqueued.pk).args[1] == [nested]
    with connection.cursor() as cursor:
        cursor.execute("SELECT args::text FROM pgjobs_job WHERE id = %s", [enqueued.pk])
        assert "20000000000000000.0" in cursor.fetchone()[0]


@pytest.mark.parametrize(
    "call, path",
    [
        (lambda: demo.record.enqueue(-0.0), "args[0]"),
        (lambda: demo.compare_numbers.enqueue("x", [], [], price=[1.0, 2.0, -0.0]), "price"),
        (
            lambda: demo.compare_numbers.enqueue_many([(("x", [{"a": -0.0}], []), {})]),
            "args[1][0]['a']",
        ),
    ],
)
def test_negative_zero_is_refused_naming_its_path_and_writes_nothing(call, path):
    with pytest.raises(ArgumentsNotJSON, match="-0.0") as raised:
        call()
    assert path in str(raised.value) and "negative zero" in str(raised.value)
    assert isinstance(raised.value, TypeError)
    assert not Job.objects.exists()


def test_kwargs_path_names_the_key_and_index():
    with pytest.raises(ArgumentsNotJSON, match=r"kwargs\['price'\]\[2\] is -0.0"):
        demo.compare_numbers.enqueue("x", [], [], price=[1.0, 2.0, -0.0])


def test_a_real_worker_receives_the_numbers_unchanged_also_after_a_requeue(start_worker):
    demo.compare_numbers.enqueue("worker", NUMBERS, [*reprs(NUMBERS), "-1e+16"], big=-1e16)
    failing = demo.compare_numbers.enqueue(
        "fail once", NUMBERS, [*reprs(NUMBERS), "2e+16"], big=2e16
    )
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.output()
    assert Execution.objects.filter(label="worker").count() == 1, worker.output()
    letter = DeadLetter.objects.get(job_id=failing.pk)
    assert "the numbers were right" in letter.reason
    assert reprs(letter.args[1]) == reprs(NUMBERS) and repr(letter.kwargs["big"]) == "2e+16"
    # requeued (one SQL statement moving the stored jsonb), the numbers read back the same again
    operations.requeue_dead_letters(connection, [letter.pk])
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.output()
    assert Execution.objects.filter(label="fail once").count() == 2, worker.output()
    assert not Job.objects.exists() and not DeadLetter.objects.exists()
