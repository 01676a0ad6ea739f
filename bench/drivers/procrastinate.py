"""Procrastinate driver (psycopg async connector, async tasks)."""

from __future__ import annotations

import asyncio
import sys
import time

import procrastinate

from bench.drivers import common

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=common.database_url() if "BENCH_DATABASE_URL" in __import__("os").environ else ""
    )
)


@app.task(name="noop")
async def noop() -> None:
    pass


@app.task(name="nap")
async def nap(seconds: float) -> None:
    await asyncio.sleep(seconds)


@app.task(name="timed")
async def timed(sent: float) -> None:
    common.record_latency(sent)


async def main(argv: list[str]) -> None:
    command, *rest = argv
    async with app.open_async():
        if command == "setup":
            await app.connector.execute_query_async(
                "DROP SCHEMA public CASCADE; CREATE SCHEMA public"
            )
            await app.schema_manager.apply_schema_async()
        elif command == "worker":
            options = {"concurrency": 1, "listen_notify": True}
            while rest:
                flag = rest.pop(0)
                if flag == "--concurrency":
                    options["concurrency"] = int(rest.pop(0))
                elif flag == "--poll":
                    options["listen_notify"] = False
                    options["fetch_job_polling_interval"] = float(rest.pop(0))
                elif flag == "--interval":  # polling besides LISTEN
                    options["fetch_job_polling_interval"] = float(rest.pop(0))
            await app.run_worker_async(**options)
        elif command == "enqueue":
            n = int(rest[0])
            common.wait_for_go()
            start = time.time()
            for _ in range(n):
                await noop.defer_async()
            common.report(start=start, end=time.time())
        elif command in ("bulk", "bulk-sleep"):
            n = int(rest[0])
            start = time.perf_counter()
            if command == "bulk":
                await noop.batch_defer_async(*({} for _ in range(n)))
            else:
                await nap.batch_defer_async(
                    *({"seconds": common.sleep_seconds(i)} for i in range(n))
                )
            common.report(seconds=time.perf_counter() - start, end=time.time())
            common.hold()
        elif command == "latency":
            n, gap = int(rest[0]), float(rest[1])
            for pause in common.gaps(n, gap):
                await timed.defer_async(sent=time.time())
                await asyncio.sleep(pause)
            common.report(done=n)
        else:
            raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
