"""docs/howto/from-celery.md: a Celery project's tasks, and the code that calls them, ported.

Section by section as the guide shows them; tests/test_from_celery.py runs them with real
``runjobs`` processes (and ``run_jobs()``, as the guide's testing section does).
"""

from __future__ import annotations

from datetime import datetime

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from django_pgjobs import Retry, RetryPolicy, abort, get_result, job
from django_pgjobs.context import current_job
from django_pgjobs.models import Job
from testproject.demo.models import Counter, Signup
from testproject.handlers import partner

# -- Tasks become jobs ---------------------------------------------------------------------


@job(queue="emails", max_attempts=5)
def send_welcome_email(signup_id: int) -> None:
    # Arguments are JSON: pass the id and load the row, as it is when the job runs.
    signup = Signup.objects.get(pk=signup_id)
    send_mail("Welcome!", "Thanks for signing up.", "hello@example.com", [signup.email])
    Signup.objects.filter(pk=signup_id).update(welcomed_at=timezone.now())


# -- delay and apply_async -----------------------------------------------------------------


def sign_up(email: str) -> Signup:
    with transaction.atomic():
        signup = Signup.objects.create(email=email)
        # One INSERT in this transaction: the job exists exactly if the signup does.
        # No transaction.on_commit(lambda: send_welcome_email.delay(signup.pk)) needed.
        send_welcome_email.delay(signup.pk)
    return signup


def welcome_later(signup: Signup, when: datetime) -> Job:
    # eta: an aware datetime (countdown=seconds works too); priority: -100..100, higher first
    return send_welcome_email.apply_async(
        args=[signup.pk], eta=when, queue="emails-bulk", priority=-10
    )


# -- Retries -------------------------------------------------------------------------------


@job(
    queue="partner",
    max_attempts=5,  # Celery's max_retries=4: the first attempt and four retries
    retry_on=(partner.Unavailable,),  # autoretry_for: any other exception dead-letters at once
    retry=RetryPolicy(base_seconds=2, cap_seconds=600),  # retry_backoff=2, retry_backoff_max=600
)
def sync_account(account: str) -> None:
    partner.push(account)


@job(queue="partner", max_attempts=4)
def push_points(account: str) -> None:
    # Celery's self.request is current_job(): id, attempts (1 on the first run), max_attempts,
    # queue, created_at...
    attempt = current_job().attempts
    try:
        partner.push(account)
    except partner.RateLimited as error:
        # self.retry(exc=error, countdown=error.retry_after), and like it, the attempt counts
        raise Retry(after=error.retry_after, reason=f"attempt {attempt}: {error}") from error


# -- Time limits ---------------------------------------------------------------------------


@job(queue="reports", timeout=300)  # Celery's time_limit=300; there is no soft limit
def rebuild_search_index(shard: int) -> None:
    Counter.objects.update_or_create(name=f"index-{shard}", defaults={"value": 1})


# -- Results -------------------------------------------------------------------------------


@job(queue="reports", keep_result=True)
def count_signups(domain: str) -> int:
    return Signup.objects.filter(email__endswith=f"@{domain}").count()


def signups_counted(job_id: int) -> int | None:
    # Celery's AsyncResult(task_id).get(): a read, never a wait; None until the job succeeded
    result = get_result(job_id)
    return result.return_value if result.status == "successful" else None


# -- Revoking ------------------------------------------------------------------------------


def cancel_welcome(job_id: int) -> bool:
    # Celery's revoke(task_id): a waiting job is deleted (True); a running one is asked to stop
    return job_id in abort(job_id, requested_by="signup cancelled").cancelled


# -- One in flight -------------------------------------------------------------------------


def sync_once(account: str) -> Job:
    # One sync per account waiting or running: a second call returns the first job
    return sync_account.using(unique_key=f"sync:{account}").delay(account)


# -- Canvas: chains and groups -------------------------------------------------------------


@job(queue="reports", atomic=True)
def build_report(name: str) -> None:
    Counter.objects.update_or_create(name=f"report-{name}", defaults={"value": 1})
    # Celery's chain(build_report.s(name), email_report.si(name)): enqueue the next step at the
    # end. atomic=True: it commits with this job's completion, so it exists exactly when this
    # step succeeded.
    email_report.delay(name)


@job(queue="reports")
def email_report(name: str) -> None:
    send_mail(f"Report {name}", "Attached.", "reports@example.com", ["team@example.com"])
    Counter.objects.filter(name=f"report-{name}").update(value=2)


def welcome_all(signup_ids: list[int]) -> list[Job]:
    # Celery's group(send_welcome_email.s(pk) for pk in signup_ids).apply_async(): one INSERT
    return send_welcome_email.enqueue_many([(pk,) for pk in signup_ids])


# -- Periodic jobs, until the scheduler comes ----------------------------------------------


@job(queue="reports")
def send_daily_digest(day: str) -> None:
    count = Signup.objects.filter(created_at__date=day).count()
    send_mail(f"Signups on {day}", f"{count} new.", "reports@example.com", ["team@example.com"])
