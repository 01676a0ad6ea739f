"""The operator's admin: jobs, dead letters, queues, workers, schedules, a dashboard, the
outbox, the flow control keys and the repair records.

Pages and the permission each needs are listed in docs/reference/admin.md. Every change goes
through ``django_pgjobs.operations``; see ``admin.base`` for the permission model.
"""

from django.contrib import admin

from ..models import (
    Dashboard,
    DeadLetter,
    FlowKey,
    Job,
    OutboxDeadLetter,
    OutboxEvent,
    QueueState,
    Repair,
    Schedule,
    Worker,
    Workflow,
)
from .dashboard import DashboardEntryAdmin
from .dead_letters import DeadLetterAdmin
from .flow import FlowKeyAdmin
from .jobs import JobAdmin
from .outbox import OutboxDeadLetterAdmin, OutboxEventAdmin
from .queues import QueueStateAdmin, WorkerAdmin
from .repair_records import RepairAdmin
from .schedules import ScheduleAdmin
from .workflows import WorkflowAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(DeadLetter, DeadLetterAdmin)
admin.site.register(QueueState, QueueStateAdmin)
admin.site.register(Worker, WorkerAdmin)
admin.site.register(Dashboard, DashboardEntryAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(OutboxEvent, OutboxEventAdmin)
admin.site.register(OutboxDeadLetter, OutboxDeadLetterAdmin)
admin.site.register(Workflow, WorkflowAdmin)
admin.site.register(FlowKey, FlowKeyAdmin)
admin.site.register(Repair, RepairAdmin)

__all__ = [
    "DashboardEntryAdmin",
    "DeadLetterAdmin",
    "JobAdmin",
    "OutboxDeadLetterAdmin",
    "OutboxEventAdmin",
    "QueueStateAdmin",
    "RepairAdmin",
    "ScheduleAdmin",
    "WorkerAdmin",
    "WorkflowAdmin",
]
