from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgjobs", "0009_held_jobs"),
    ]

    operations = [
        migrations.RenameField(
            model_name="queuestat",
            old_name="dead",
            new_name="dead_lettered",
        ),
    ]
