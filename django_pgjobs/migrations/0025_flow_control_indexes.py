"""The indexes of flow control on pgjobs_job, built without blocking writes (CONCURRENTLY, so
the migration is not atomic):

- ``pgjobs_job_claim_idx`` leaves jobs with a flow key out (``AND flow_key IS NULL``: the plain
  claim's own condition); the new one is built under another name, the old one dropped, the new
  one renamed (a brief lock), so the claim is never left without its index;
- ``pgjobs_job_flow_ready_idx`` and ``pgjobs_job_flow_running_idx``: a key's ready jobs in FIFO
  order and its running ones, for ``claim_jobs_flow``.
"""

from django.db import migrations, models

OLD_CLAIM = (
    "CREATE INDEX CONCURRENTLY pgjobs_job_claim_idx ON pgjobs_job "
    "(priority DESC, run_after, id) WHERE status = 'ready'"
)
NEW_CLAIM = (
    "CREATE INDEX CONCURRENTLY pgjobs_job_claim_plain_idx ON pgjobs_job "
    "(priority DESC, run_after, id) WHERE status = 'ready' AND flow_key IS NULL"
)
FLOW_READY = (
    "CREATE INDEX CONCURRENTLY pgjobs_job_flow_ready_idx ON pgjobs_job "
    "(flow_key, run_after, id) WHERE status = 'ready' AND flow_key IS NOT NULL"
)
FLOW_RUNNING = (
    "CREATE INDEX CONCURRENTLY pgjobs_job_flow_running_idx ON pgjobs_job "
    "(flow_key) WHERE status = 'running' AND flow_key IS NOT NULL"
)


def _build(create: str, name: str) -> list:
    """Build an index concurrently; an interrupted build leaves an invalid one: start again."""
    return [
        migrations.RunSQL(f"DROP INDEX CONCURRENTLY IF EXISTS {name}", migrations.RunSQL.noop),
        migrations.RunSQL(create, reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {name}"),
    ]


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("django_pgjobs", "0024_flow_control"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                *_build(NEW_CLAIM, "pgjobs_job_claim_plain_idx"),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS pgjobs_job_claim_idx", reverse_sql=OLD_CLAIM
                ),
                migrations.RunSQL(
                    "ALTER INDEX pgjobs_job_claim_plain_idx RENAME TO pgjobs_job_claim_idx",
                    reverse_sql="ALTER INDEX pgjobs_job_claim_idx "
                    "RENAME TO pgjobs_job_claim_plain_idx",
                ),
                *_build(FLOW_READY, "pgjobs_job_flow_ready_idx"),
                *_build(FLOW_RUNNING, "pgjobs_job_flow_running_idx"),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="pgjobs_job_claim_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("flow_key__isnull", True), ("status", "ready")),
                        name="pgjobs_job_claim_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("flow_key"),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("flow_key__isnull", False), ("status", "ready")),
                        name="pgjobs_job_flow_ready_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("flow_key"),
                        condition=models.Q(("flow_key__isnull", False), ("status", "running")),
                        name="pgjobs_job_flow_running_idx",
                    ),
                ),
            ],
        ),
    ]
