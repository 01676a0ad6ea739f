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

from .. import operations
from ..states import View
from .base import plural

WAITING = frozenset({View.DUE, View.SCHEDULED, View.RETRYING})


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    description: str  # shown in the changelist's action menu
    permission: str  # "operate" (change_<model>) or "remove" (delete_<model>)
    operation: Callable[..., list[int]]
    done: str  # "{n}" is replaced by e.g. "12 jobs", "{count}" by 12, "{s}" by "s"
    views: frozenset[str] = frozenset()  # job views it applies to (jobs only)
    noun: str = "job"
    records_user: bool = False  # the operation takes requested_by: the admin user who acted
    #: Cannot be undone: runs only once its confirmation page is answered (``confirm``), which
    #: says ``consequence``.
    confirm: bool = False
    consequence: str = ""
    #: Whose pages the ids the operation returns are (the result message links them); None when
    #: the rows are gone.
    links_to: str | None = "job"

    @property
    def valid_for(self) -> str:
        """The job views it applies to, as words ("due, retrying or scheduled")."""
        views = sorted(self.views)
        return " or ".join(filter(None, [", ".join(views[:-1]), views[-1]])) if views else ""

    def message(self, count: int) -> str:
        return self.done.format(
            n=plural(count, self.noun), count=f"{count:,}", s="" if count == 1 else "s"
        )

    def apply(self, connection, ids: Sequence[int], request) -> list[int]:
        """Run the operation on ``ids`` for the admin user of ``request``."""
        if self.records_user:
            user = request.user.get_username()
            return self.operation(connection, ids, requested_by=f"admin user {user!r}")
        return self.operation(connection, ids)

    def skipped(self, count: int, why: str) -> str:
        if not count:
            return ""
        was = "was" if count == 1 else "were"
        return f"{plural(count, 'selected ' + self.noun)} {was} left alone ({why})."


JOB_ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            name="run_now",
            label="Run now",
            description="Run selected scheduled jobs now",
            permission="operate",
            operation=operations.run_jobs_now,
            done="Set {n} to run now.",
            views=frozenset({View.SCHEDULED}),
        ),
        Action(
            name="retry_now",
            label="Retry now",
            description="Retry selected retrying jobs now",
            permission="operate",
            operation=operations.run_jobs_now,
            done="Set {n} to retry now.",
            views=frozenset({View.RETRYING}),
        ),
        Action(
            name="cancel",
            label="Cancel job",
            description="Cancel selected waiting jobs (delete them)",
            permission="remove",
            operation=operations.cancel_jobs,
            done="Cancelled {n}.",
            views=WAITING,
            records_user=True,  # in the reason of the workflow a cancelled step ends
            confirm=True,
            consequence="Cancelling deletes these waiting jobs: they will not run, and nothing "
            "of them is kept. A step of a workflow is kept as cancelled, and its workflow ends "
            "(aborted): its later steps are cancelled.",
            links_to=None,
        ),
        Action(
            name="abort",
            label="Abort",
            description="Abort selected running jobs",
            permission="operate",
            operation=operations.request_abort,
            done="Abort requested for {count} running job{s}.",
            views=frozenset({View.RUNNING}),
            records_user=True,
            confirm=True,
            consequence="Their workers are asked to stop these running jobs: an async job is "
            "cancelled, a sync job stops where it checks for the request. An aborted attempt ends "
            "in the dead letters (error type Aborted), not retried.",
        ),
    )
}

DEAD_LETTER_ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            name="requeue",
            label="Requeue",
            description="Requeue selected dead letters",
            permission="operate",
            operation=operations.requeue_dead_letters,
            done="Requeued {n}.",
            records_user=True,  # in the new jobs' audit trail
        ),
        Action(
            name="delete",
            label="Delete for good",
            description="Delete selected dead letters for good",
            permission="remove",
            operation=operations.delete_dead_letters,
            done="Deleted {n}.",
            noun="dead letter",
            confirm=True,
            consequence="Deleting removes these dead letters for good, their arguments and "
            "errors with them.",
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
