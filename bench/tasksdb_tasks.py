"""The benchmark's tasks for django-tasks-db."""

import time

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from bench.drivers.common import record_latency


@task()
def noop() -> None:
    pass


@task()
def nap(seconds: float) -> None:
    time.sleep(seconds)


@task()
def timed(sent: float) -> None:
    record_latency(sent)
