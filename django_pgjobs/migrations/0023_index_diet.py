"""The claim writes one index entry fewer: ``(queue, status)`` leaves running rows out.

A claim turns a ready row into a running one with an UPDATE that cannot be HOT (``status`` is in
the predicate of the claim's index), so the new row version gets an entry in every index whose
predicate it matches. ``pgjobs_job_queue_status_idx`` had no predicate: every claim wrote an
entry in it, for the queue and status of a row the lease index already holds. Its successor
``pgjobs_job_queue_idx`` holds the rows that are not running; the queries that list queues
read the running rows through ``pgjobs_job_lease_idx`` (docs/reference/database.md).

Built without blocking writes (CONCURRENTLY, so the migration is not atomic): the new index is
made before the old one goes, so no query is ever left without one.
"""

from django.db import migrations, models

NEW = (
    "CREATE INDEX CONCURRENTLY pgjobs_job_queue_idx ON pgjobs_job (queue, status) "
    "WHERE NOT (status = 'running')"
)
OLD = "CREATE INDEX CONCURRENTLY pgjobs_job_queue_status_idx ON pgjobs_job (queue, status)"


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("django_pgjobs", "0022_translatable_names"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                # an interrupted build leaves an invalid index behind: start again without it
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS pgjobs_job_queue_idx",
                    reverse_sql=migrations.RunSQL.noop,
                ),
                migrations.RunSQL(
                    NEW, reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgjobs_job_queue_idx"
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS pgjobs_job_queue_status_idx",
                    reverse_sql=OLD,
                ),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="pgjobs_job_queue_status_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("queue"),
                        models.F("status"),
                        condition=models.Q(("status", "running"), _negated=True),
                        name="pgjobs_job_queue_idx",
                    ),
                ),
            ],
        ),
    ]
