"""Vacuums leave ``pgjobs_job``'s empty tail pages in place: ``vacuum_truncate = false``.

A vacuum that finds empty pages at the end of a table gives them back to the file system, and
for that it takes an ACCESS EXCLUSIVE lock on the table: every claim, acknowledgement and
enqueue waits until it is done. A queue's table empties and fills all day, so its tail is often
empty and regrown seconds later; under a steady load of 13,700 jobs/s its vacuums (the
workers' and autovacuum's) truncated it again and again, and each time the queue stopped for up
to a few seconds (docs/benchmarks.md, sustained load). Without the truncation the pages stay
allocated and are reused by the next rows; the table keeps the size of its busiest moment,
which the next ``VACUUM FULL`` (or ``pg_repack``) gives back if ever needed.

The storage parameter applies to autovacuum and to every ``VACUUM`` that does not say
otherwise. Setting it takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgjobs", "0025_flow_control_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE pgjobs_job SET (vacuum_truncate = false)",
            reverse_sql="ALTER TABLE pgjobs_job RESET (vacuum_truncate)",
        ),
    ]
