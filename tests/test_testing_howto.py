# tests/test_testing_howto.py
import pytest
from django.test import TestCase

from django_pgjobs.models import DeadLetter
from django_pgjobs.testing import assert_enqueued, enqueued, run_jobs
from testproject.demo.jobs import always_fails, send_welcome_email
from testproject.demo.models import Signup


class SignupTests(TestCase):
    def test_signup_enqueues_the_welcome_email(self):
        self.client.post("/", {"email": "ada@example.com"})
        signup = Signup.objects.get(email="ada@example.com")
        job = assert_enqueued(send_welcome_email, signup.pk)
        self.assertEqual(job.queue, "emails")
        self.assertEqual(len(enqueued(queue="emails")), 1)

    def test_the_welcome_email_is_sent(self):
        self.client.post("/", {"email": "ada@example.com"})
        stats = run_jobs(["emails"])
        self.assertEqual(stats.succeeded, 1)
        self.assertIsNotNone(Signup.objects.get(email="ada@example.com").welcomed_at)
        self.assertFalse(DeadLetter.objects.exists())

    def test_a_job_that_keeps_failing_ends_in_the_dead_letters(self):
        always_fails.enqueue("the mail server is down")  # max_attempts=3
        stats = run_jobs(with_scheduled=True)  # its retries too, without waiting
        self.assertEqual((stats.retried, stats.dead_lettered), (2, 1))
        self.assertEqual(DeadLetter.objects.get().attempts, 3)


@pytest.mark.django_db
def test_the_welcome_email_is_sent_with_pytest(client):
    client.post("/", {"email": "ada@example.com"})
    assert run_jobs(["emails"]).succeeded == 1
    assert Signup.objects.get(email="ada@example.com").welcomed_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_welcome_email_is_sent_by_worker_threads(client):
    client.post("/", {"email": "ada@example.com"})
    assert run_jobs(["emails"], concurrency=4).succeeded == 1
    assert Signup.objects.get(email="ada@example.com").welcomed_at is not None


# Not shown on the page: rows made before the examples', so that a signup's id is not 1 and an
# example that assumed the first id would fail here.
def make_earlier_signups() -> None:
    Signup.objects.bulk_create(Signup(email=f"earlier-{n}@example.com") for n in range(3))


@pytest.fixture(autouse=True)
def earlier_signups(request):
    if request.instance is None:  # the pytest functions; the TestCase has its setUpTestData
        request.getfixturevalue("db")
        make_earlier_signups()


SignupTests.setUpTestData = classmethod(lambda cls: make_earlier_signups())
