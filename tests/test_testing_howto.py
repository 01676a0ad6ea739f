# tests/test_testing_howto.py
import pytest

from django_pgjobs.models import DeadLetter
from django_pgjobs.testing import assert_enqueued, enqueued, run_jobs
from testproject.demo.jobs import send_welcome_email
from testproject.demo.models import Signup


@pytest.mark.django_db
def test_signup_enqueues_the_welcome_email(client):
    client.post("/", {"email": "ada@example.com"})
    signup = Signup.objects.get(email="ada@example.com")
    job = assert_enqueued(send_welcome_email, signup.pk)
    assert job.queue == "emails"
    assert len(enqueued(queue="emails")) == 1


@pytest.mark.django_db(transaction=True)
def test_the_welcome_email_is_sent(client):
    client.post("/", {"email": "ada@example.com"})
    stats = run_jobs(["emails"])
    assert stats.succeeded == 1
    assert Signup.objects.get(email="ada@example.com").welcomed_at is not None
    assert not DeadLetter.objects.exists()


# Not shown on the page: rows made before the example's, so that its signup's id is not 1 and
# an example that assumed the first id would fail here.
@pytest.fixture(autouse=True)
def earlier_signups(db):
    Signup.objects.bulk_create(Signup(email=f"earlier-{n}@example.com") for n in range(3))
