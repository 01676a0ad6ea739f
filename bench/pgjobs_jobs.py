"""The benchmark's jobs for django-pgjobs."""

import asyncio
import time

from bench.drivers.common import record_latency, record_probe
from django_pgjobs import job


@job(name="bench.noop")
def noop() -> None:
    pass


@job(name="bench.nap")
def nap(seconds: float) -> None:
    time.sleep(seconds)


@job(name="bench.async_nap")
async def async_nap(seconds: float) -> None:
    await asyncio.sleep(seconds)


@job(name="bench.timed")
def timed(sent: float) -> None:
    record_latency(sent)


@job(name="bench.probe")
def probe(sent: float) -> None:
    record_probe(sent)
