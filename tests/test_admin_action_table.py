"""``admin/actions.py``: the changelist actions are generated from the action tables, so a new
entry of ``JOB_ACTIONS`` or ``DEAD_LETTER_ACTIONS`` is offered with its label and permission
without a hand-written wrapper."""

from __future__ import annotations

import pytest
from django.contrib import admin

from django_pgjobs.admin.actions import DEAD_LETTER_ACTIONS, JOB_ACTIONS
from django_pgjobs.models import DeadLetter, Job

#: Actions that ask for more than a confirmation (a page of their own), outside the tables.
WITH_A_FORM = {"replay_over_time"}  # the rate of a staggered replay (admin/repairs.py)


@pytest.mark.parametrize("model, table", [(Job, JOB_ACTIONS), (DeadLetter, DEAD_LETTER_ACTIONS)])
def test_every_action_of_the_table_is_a_changelist_action(model, table):
    model_admin = admin.site._registry[model]
    generated = {
        name: (func, description)
        for func, name, description in model_admin._get_base_actions()
        if name != "delete_selected"  # the site-wide action, removed by OperatorAdmin.get_actions
        and name not in WITH_A_FORM
    }
    assert list(generated) == list(table)
    for name, action in table.items():
        func, description = generated[name]
        assert description == action.description
        assert func.allowed_permissions == [action.permission]


@pytest.mark.parametrize("table", [JOB_ACTIONS, DEAD_LETTER_ACTIONS])
def test_every_action_that_asks_first_says_why_and_labels_its_yes(table):
    for action in table.values():
        if action.confirm:
            assert action.consequence and str(action.yes).startswith("Yes, "), action.name
