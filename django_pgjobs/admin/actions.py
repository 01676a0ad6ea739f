"""The operator actions on jobs and dead letters, each one function of ``operations``.

An action is offered only where it is valid: ``views`` lists the job views (``states.View``) it
applies to, and the list page only offers the actions valid for the view it shows. The
operations re-check validity in SQL (``status = 'ready'``...), so a job claimed between the click
and the statement is left alone and reported as skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.contrib import admin
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop, ngettext, ngettext_lazy

from .. import operations
from ..states import View, view_label

WAITING = frozenset({View.DUE, View.SCHEDULED, View.RETRYING})


@dataclass(frozen=True)
class Action:
    name: str
    label: str | Promise
    description: str | Promise  # shown in the changelist's action menu
    permission: str  # "operate" (change_<model>) or "remove" (delete_<model>)
    operation: Callable[..., list[int]]
    #: What was done, singular and plural (``ngettext_lazy`` by "count"): "%(n)s" is the count
    #: with thousands separators.
    done: str | Promise
    views: frozenset[str] = frozenset()  # job views it applies to (jobs only)
    noun: str = "job"  # "job" or "dead letter": which "left alone" sentence ``skipped`` says
    records_user: bool = False  # the operation takes requested_by: the admin user who acted
    #: Cannot be undone: runs only once its confirmation page is answered (``confirm``), which
    #: says ``consequence``.
    confirm: bool = False
    consequence: str | Promise = ""
    yes: str | Promise = ""  # the confirmation page's button ("Yes, abort")
    #: Whose pages the ids the operation returns are (the result message links them); None when
    #: the rows are gone.
    links_to: str | None = "job"

    @property
    def valid_for(self) -> str:
        """The job views it applies to, as words ("due, retrying or scheduled")."""
        views = [str(view_label(view)) for view in sorted(self.views)]
        if not views:
            return ""
        if len(views) == 1:
            return views[0]
        return _("%(views)s or %(last)s") % {"views": ", ".join(views[:-1]), "last": views[-1]}

    def message(self, count: int) -> str:
        return self.done % {"count": count, "n": f"{count:,}"}

    def apply(self, connection, ids: Sequence[int], request) -> list[int]:
        """Run the operation on ``ids`` for the admin user of ``request``."""
        if self.records_user:
            user = request.user.get_username()
            return self.operation(connection, ids, requested_by=f"admin user {user!r}")
        return self.operation(connection, ids)

    def skipped(self, count: int, why: str) -> str:
        if not count:
            return ""
        if self.noun == "dead letter":
            text = ngettext(
                "%(n)s selected dead letter was left alone (%(why)s).",
                "%(n)s selected dead letters were left alone (%(why)s).",
                count,
            )
        else:
            text = ngettext(
                "%(n)s selected job was left alone (%(why)s).",
                "%(n)s selected jobs were left alone (%(why)s).",
                count,
            )
        return text % {"n": f"{count:,}", "why": why}


JOB_ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            name="run_now",
            label=_("Run now"),
            description=_("Run selected scheduled jobs now"),
            permission="operate",
            operation=operations.run_jobs_now,
            done=ngettext_lazy("Set %(n)s job to run now.", "Set %(n)s jobs to run now.", "count"),
            views=frozenset({View.SCHEDULED}),
        ),
        Action(
            name="retry_now",
            label=_("Retry now"),
            description=_("Retry selected retrying jobs now"),
            permission="operate",
            operation=operations.run_jobs_now,
            done=ngettext_lazy(
                "Set %(n)s job to retry now.", "Set %(n)s jobs to retry now.", "count"
            ),
            views=frozenset({View.RETRYING}),
        ),
        Action(
            name="cancel",
            label=_("Cancel job"),
            description=_("Cancel selected waiting jobs (delete them)"),
            permission="remove",
            operation=operations.cancel_jobs,
            done=ngettext_lazy("Cancelled %(n)s job.", "Cancelled %(n)s jobs.", "count"),
            views=WAITING,
            records_user=True,  # in the reason of the workflow a cancelled step ends
            confirm=True,
            yes=_("Yes, cancel job"),
            consequence=_(
                "Cancelling deletes these waiting jobs: they will not run, and nothing "
                "of them is kept. A step of a workflow is kept as cancelled, and its workflow "
                "ends (aborted): its later steps are cancelled."
            ),
            links_to=None,
        ),
        Action(
            name="abort",
            label=_("Abort"),
            description=_("Abort selected running jobs"),
            permission="operate",
            operation=operations.request_abort,
            done=ngettext_lazy(
                "Abort requested for %(n)s running job.",
                "Abort requested for %(n)s running jobs.",
                "count",
            ),
            views=frozenset({View.RUNNING}),
            records_user=True,
            confirm=True,
            yes=_("Yes, abort"),
            consequence=_(
                "Their workers are asked to stop these running jobs: an async job is "
                "cancelled, a sync job stops where it checks for the request. An aborted attempt "
                "ends in the dead letters (error type Aborted), not retried."
            ),
        ),
    )
}

DEAD_LETTER_ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            name="requeue",
            label=_("Requeue"),
            description=_("Requeue selected dead letters"),
            permission="operate",
            operation=operations.requeue_dead_letters,
            done=ngettext_lazy("Requeued %(n)s job.", "Requeued %(n)s jobs.", "count"),
            records_user=True,  # in the new jobs' audit trail
        ),
        Action(
            name="delete",
            label=_("Delete for good"),
            description=_("Delete selected dead letters for good"),
            permission="remove",
            operation=operations.delete_dead_letters,
            done=ngettext_lazy(
                "Deleted %(n)s dead letter.", "Deleted %(n)s dead letters.", "count"
            ),
            noun="dead letter",
            confirm=True,
            yes=_("Yes, delete for good"),
            consequence=_(
                "Deleting removes these dead letters for good, their arguments and "
                "errors with them."
            ),
            links_to=None,
        ),
    )
}


def bulk_actions(table: dict[str, Action]) -> tuple[Callable[..., None], ...]:
    """The changelist actions of ``table`` (a ModelAdmin's ``actions``): each one runs
    ``model_admin.bulk(request, queryset, action)``, behind the action's permission, and returns
    what it returns (the confirmation page of an action that asks first)."""

    def changelist_action(action: Action) -> Callable[..., None]:
        def run(model_admin, request, queryset):
            return model_admin.bulk(request, queryset, action)  # a confirmation page, or None

        run.__name__ = run.__qualname__ = action.name  # Django names the action after it
        return admin.action(description=action.description, permissions=[action.permission])(run)

    return tuple(changelist_action(action) for action in table.values())


#: Job actions offered on the list page, per value of its ``view`` filter (None: no filter).
JOB_ACTIONS_BY_FILTER: dict[str | None, Sequence[str]] = {
    None: ("run_now", "retry_now", "cancel", "abort"),
    View.RUNNING: ("abort",),
    View.DUE: ("cancel",),
    View.SCHEDULED: ("run_now", "cancel"),
    View.RETRYING: ("retry_now", "cancel"),
}


# The label of the changelists' action button in Django 6 ("Run"; "Go" before), which Django's
# own German catalogue lacks: the app's catalogue carries it, so a German page is German whole.
gettext_noop("Run")
