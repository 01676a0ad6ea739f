"""Workflows record which of their steps are groups (``pgjobs_workflow.groups``, their indexes).

``previous_results()`` gives a group's results as a list and one job's as its value; told apart
by the step's size alone, a group of one job (``group(resize.s(i) for i in ids)`` with one id)
gave its callback a bare value. Nullable: a release before it inserts no value, and its groups
of one read as one job, as they did. Adding a nullable column without a default rewrites
nothing.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgjobs", "0026_jobs_table_not_truncated"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="groups",
            field=models.JSONField(
                blank=True, help_text="Which steps are groups (their indexes).", null=True
            ),
        ),
    ]
