"""ORM lanes (``django_pgjobs/worker/lanes.py``) without a database: where a bound task's
thread-sensitive calls run, and which lanes the pool hands out again."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from django_pgjobs.worker.lanes import LanePool, bind, unbind


def _thread_name() -> str:
    return threading.current_thread().name


async def _run_bound(lane, started: asyncio.Event, release: asyncio.Event):
    key = bind(lane)
    try:
        own = await sync_to_async(_thread_name)()
        started.set()
        await release.wait()  # the other job runs its calls meanwhile
        child = await asyncio.create_task(sync_to_async(_thread_name)())
        return own, child
    finally:
        unbind(key)


def test_each_bound_task_and_its_children_call_on_its_own_lane():
    async def main():
        pool = LanePool()
        first, second = pool.take("job 1"), pool.take("job 2")
        events = [asyncio.Event() for _ in range(3)]
        results = await asyncio.gather(
            _run_bound(first, events[0], events[2]),
            _run_bound(second, events[1], events[2]),
            _release_when(events),
        )
        unbound = await sync_to_async(_thread_name)()  # asgiref's shared thread, not a lane
        pool.close()
        return results[:2], unbound

    (first, second), unbound = asyncio.run(main())
    assert first == ("pgjobs-async-lane-0", "pgjobs-async-lane-0")
    assert second == ("pgjobs-async-lane-1", "pgjobs-async-lane-1")
    assert not unbound.startswith("pgjobs-async-lane")


async def _release_when(events):
    await events[0].wait()
    await events[1].wait()
    events[2].set()


def test_the_pool_reuses_the_last_lane_given_back_and_never_a_busy_or_retired_one():
    pool = LanePool()
    first, second = pool.take("a"), pool.take("b")
    pool.give_back(first, reusable=True)
    pool.give_back(second, reusable=True)
    assert pool.take("c") is second  # last in, first out: the warmest connection
    assert pool.take("d") is first
    pool.give_back(first, reusable=False)  # its connections were not checked after its job
    first_again = pool.take("e")
    assert first_again is not first and first not in pool.lanes
    second.retired = True  # given up on while its job ran
    pool.give_back(second, reusable=True)
    assert second not in pool.lanes and pool.take("f") is not second
