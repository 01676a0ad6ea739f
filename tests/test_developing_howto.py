# tests/test_developing_howto.py
import pytest
from django.db import transaction

from testproject.demo.jobs import record
from testproject.demo.models import Execution


@pytest.fixture
def immediate(settings):
    settings.PGJOBS = {**settings.PGJOBS, "IMMEDIATE": True, "IMMEDIATE_WITHOUT_DEBUG": True}


@pytest.mark.django_db(transaction=True)
def test_a_job_runs_when_its_transaction_commits(immediate):
    with transaction.atomic():
        record.enqueue("committed")
        assert not Execution.objects.exists()  # not before the commit
    assert Execution.objects.get().label == "committed"


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_transaction_rolls_back_never_runs(immediate):
    with pytest.raises(RuntimeError), transaction.atomic():
        record.enqueue("rolled back")
        raise RuntimeError("the view failed")
    assert not Execution.objects.exists()
