"""The demo: ``python -m testproject demo`` (scripted, exits) or ``python -m testproject serve``.

Without ``DATABASE_URL`` both start a private throwaway PostgreSQL and remove it on exit.

``demo``  migrates, signs up a few people through the real view (each signup enqueues its
          welcome email in the same transaction, one signup is rolled back), enqueues a job
          that fails twice before succeeding and one that always fails, then runs
          ``manage.py runjobs --burst`` as a real subprocess and shows what happened.
``serve`` migrates, creates the superuser admin/admin, and runs ``runserver`` plus a
          ``runjobs`` worker until Ctrl-C: open http://127.0.0.1:8000/ and /admin/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, str(ROOT / "testproject" / "manage.py")]


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()  # starts the throwaway PostgreSQL when DATABASE_URL is not set
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def demo() -> int:
    _setup()
    from django.db import transaction
    from django.test import Client

    from django_pgjobs.models import DeadLetter, Job
    from testproject import throwaway_pg
    from testproject.demo import jobs
    from testproject.demo.models import Execution, Signup

    url = os.environ["DATABASE_URL"]
    print(f"PostgreSQL: {url} ({throwaway_pg.server_description() or 'from DATABASE_URL'})")
    client = Client()
    for email in ("ada@example.com", "grace@example.com", "linus@example.com"):
        client.post("/", {"email": email})
    try:
        with transaction.atomic():
            signup = Signup.objects.create(email="rolled-back@example.com")
            jobs.send_welcome_email.enqueue(signup.pk)
            raise RuntimeError("simulated error after enqueue")
    except RuntimeError:
        pass
    jobs.flaky.enqueue("demo-flaky", fail_times=2)
    jobs.always_fails.enqueue("demo: this job always fails")
    jobs.record.using(queue="reports", priority=10).enqueue("demo-report")
    print(f"Enqueued {Job.objects.count()} jobs (the rolled-back signup left none behind):")
    for job in Job.objects.order_by("id"):
        print(f"  #{job.id} {job.name}{tuple(job.args)} queue={job.queue}")

    print("\nRunning: manage.py runjobs --burst --concurrency 4 (until the retries are done)\n")
    deadline = time.monotonic() + 60
    while Job.objects.filter(status__in=["ready", "running"]).exists():
        if time.monotonic() > deadline:
            print("jobs still pending after 60s", file=sys.stderr)
            return 1
        code = subprocess.call([*MANAGE, "runjobs", "--burst", "--concurrency", "4"], cwd=ROOT)
        if code != 0:
            return code
        time.sleep(0.5)

    print("\nSignups:")
    for signup in Signup.objects.order_by("id"):
        print(f"  {signup.email}: welcomed at {signup.welcomed_at:%H:%M:%S.%f}")
    flaky_attempts = Execution.objects.filter(label="demo-flaky").count()
    print(f"flaky job: succeeded on attempt {flaky_attempts}")
    for dead in DeadLetter.objects.all():
        print(f"dead letter: {dead.name} after {dead.attempts} attempts: {dead.reason}")
    print(f"jobs left in the queue: {Job.objects.count()}")
    ok = (
        Signup.objects.filter(welcomed_at__isnull=False).count() == 3
        and DeadLetter.objects.count() == 1
        and not Job.objects.exists()
    )
    print("\nDemo finished: " + ("everything as expected." if ok else "UNEXPECTED RESULT"))
    return 0 if ok else 1


def serve() -> int:
    _setup()
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    if not user_model.objects.filter(username="admin").exists():
        user_model.objects.create_superuser("admin", "admin@example.com", "admin")
    print(f"PostgreSQL: {os.environ['DATABASE_URL']}")
    print("Open http://127.0.0.1:8000/ (signups) and http://127.0.0.1:8000/admin/ (admin/admin)")
    worker = subprocess.Popen([*MANAGE, "runjobs", "--concurrency", "4"], cwd=ROOT)
    server = subprocess.Popen([*MANAGE, "runserver", "--noreload", "127.0.0.1:8000"], cwd=ROOT)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for process in (server, worker):
            if process.poll() is None:
                process.terminate()
        for process in (server, worker):
            process.wait(30)
    return 0


def main(argv: list[str]) -> int:
    commands = {"demo": demo, "serve": serve}
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__)
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
