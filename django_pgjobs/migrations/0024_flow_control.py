"""Flow control (docs/explanation/flow-control.md): the keys' table, and the flow key of jobs and
dead letters (nullable, no default: no table rewrite). The indexes on pgjobs_job come in the
next migration, built without blocking writes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgjobs", "0023_index_diet"),
    ]

    operations = [
        migrations.CreateModel(
            name="FlowKey",
            fields=[
                ("key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                (
                    "concurrency_limit",
                    models.IntegerField(
                        blank=True,
                        help_text="Jobs of this key running at once at most; empty: any.",
                        null=True,
                    ),
                ),
                (
                    "rate",
                    models.FloatField(
                        blank=True,
                        help_text="Jobs started per second at most; empty: no rate limit.",
                        null=True,
                    ),
                ),
                (
                    "burst",
                    models.FloatField(
                        blank=True,
                        help_text="The token bucket's size: jobs started at once at most.",
                        null=True,
                    ),
                ),
                ("tokens", models.FloatField(default=0, help_text="Tokens left at refilled_at.")),
                ("refilled_at", models.DateTimeField(blank=True, null=True)),
                (
                    "last_served_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a claim last took a job of this key (fairness).",
                        null=True,
                    ),
                ),
                (
                    "ready_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a job of this key may be claimable (a hint the claim keeps, never late); empty: none ready nor running.",
                        null=True,
                    ),
                ),
                (
                    "claimed_xid",
                    models.BigIntegerField(
                        blank=True,
                        help_text="The transaction of the last claim that took a job.",
                        null=True,
                    ),
                ),
            ],
            options={
                "verbose_name": "flow key",
                "db_table": "pgjobs_flow_key",
            },
        ),
        migrations.AddField(
            model_name="deadletter",
            name="flow_key",
            field=models.CharField(blank=True, max_length=255, null=True, verbose_name="flow key"),
        ),
        migrations.AddField(
            model_name="job",
            name="flow_key",
            field=models.CharField(
                blank=True,
                help_text="The flow control key (pgjobs_flow_key) whose limits this job waits on: its concurrency key, fairness key, or its job's or queue's rate limit.",
                max_length=255,
                null=True,
                verbose_name="flow key",
            ),
        ),
        migrations.AddIndex(
            model_name="flowkey",
            index=models.Index(
                models.OrderBy(models.F("last_served_at"), nulls_first=True),
                models.F("key"),
                condition=models.Q(("ready_at__isnull", False)),
                name="pgjobs_flow_key_served_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="flowkey",
            index=models.Index(
                models.F("ready_at"),
                condition=models.Q(("ready_at__isnull", False)),
                name="pgjobs_flow_key_ready_idx",
            ),
        ),
    ]
