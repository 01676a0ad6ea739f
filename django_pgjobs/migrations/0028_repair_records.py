"""The repair records (``pgjobs_repair``): one row per dead letter edited and requeued, kept after
the job it became is gone (docs/howto/repair.md). A new table: nothing existing is rewritten.
"""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgjobs", "0027_workflow_groups"),
    ]

    operations = [
        migrations.CreateModel(
            name="Repair",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False, verbose_name="id")),
                (
                    "repaired_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="repaired at"
                    ),
                ),
                (
                    "repaired_by",
                    models.CharField(
                        help_text="Who edited the arguments, e.g. admin user 'alice'.",
                        max_length=255,
                        verbose_name="repaired by",
                    ),
                ),
                ("name", models.CharField(max_length=255, verbose_name="name")),
                ("queue", models.CharField(max_length=100, verbose_name="queue")),
                (
                    "dead_letter_id",
                    models.BigIntegerField(
                        help_text="The dead letter edited (gone since).", verbose_name="dead letter"
                    ),
                ),
                (
                    "job_id",
                    models.BigIntegerField(
                        help_text="Id the job had when it was dead-lettered.", verbose_name="job id"
                    ),
                ),
                (
                    "requeued_as",
                    models.BigIntegerField(
                        help_text="Id of the job the edit requeued.", verbose_name="requeued as"
                    ),
                ),
                (
                    "error_type",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="error type"
                    ),
                ),
                (
                    "reason",
                    models.TextField(
                        help_text="Why the job had been dead-lettered.", verbose_name="reason"
                    ),
                ),
                ("args_before", models.JSONField(default=list)),
                ("kwargs_before", models.JSONField(default=dict)),
                ("args", models.JSONField(default=list)),
                ("kwargs", models.JSONField(default=dict)),
            ],
            options={
                "verbose_name": "repair",
                "verbose_name_plural": "repairs",
                "db_table": "pgjobs_repair",
                "ordering": ["-repaired_at", "-id"],
                "indexes": [
                    models.Index(
                        models.OrderBy(models.F("repaired_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="pgjobs_repair_at_idx",
                    ),
                    models.Index(models.F("job_id"), name="pgjobs_repair_job_idx"),
                    models.Index(models.F("requeued_as"), name="pgjobs_repair_requeued_idx"),
                ],
            },
        ),
    ]
