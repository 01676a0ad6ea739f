"""PgQueuer driver (asyncpg, its fastest driver; one connection per process)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import timedelta

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

from bench.drivers import common


async def _queries() -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(common.database_url())
    return conn, Queries(AsyncpgDriver(conn))


async def worker(rest: list[str]) -> None:
    most, batch = None, 10
    while rest:
        flag = rest.pop(0)
        if flag == "--concurrency":  # jobs in flight per worker (PgQueuer: >= 2 x batch)
            most = int(rest.pop(0))
        elif flag == "--batch":
            batch = int(rest.pop(0))
    conn = await asyncpg.connect(common.database_url())
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job) -> None:
        pass

    @pgq.entrypoint("nap")
    async def nap(job) -> None:
        await asyncio.sleep(float(job.payload.decode()))

    @pgq.entrypoint("timed")
    async def timed(job) -> None:
        common.record_latency(float(job.payload.decode()))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, pgq.shutdown.set)
    await pgq.qm.run(
        batch_size=batch, max_concurrent_tasks=most, dequeue_timeout=timedelta(seconds=1)
    )


async def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "worker":
        await worker(rest)
        return
    conn, queries = await _queries()
    if command == "setup":
        await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        await queries.install()
    elif command == "enqueue":
        n = int(rest[0])
        common.wait_for_go()
        start = time.time()
        for _ in range(n):
            await queries.enqueue("noop", None)
        common.report(start=start, end=time.time())
    elif command in ("bulk", "bulk-sleep"):
        n = int(rest[0])
        start = time.perf_counter()
        if command == "bulk":
            await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        else:
            payloads = [str(common.sleep_seconds(i)).encode() for i in range(n)]
            await queries.enqueue(["nap"] * n, payloads, [0] * n)
        common.report(seconds=time.perf_counter() - start, end=time.time())
        common.hold()
    elif command == "latency":
        n, gap = int(rest[0]), float(rest[1])
        for pause in common.gaps(n, gap):
            await queries.enqueue("timed", str(time.time()).encode())
            await asyncio.sleep(pause)
        common.report(done=n)
    else:
        raise SystemExit(f"unknown command {command}")
    await conn.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1:]))
