# NamespaceGrant moved from the dashboard app: only Django's state moves, the table stays as it is.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("collector", "0001_initial"),
        ("dashboard", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="NamespaceGrant",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("namespace", models.CharField(max_length=253)),
                        ("cluster", models.ForeignKey(blank=True, help_text="Empty: every cluster.", null=True, on_delete=django.db.models.deletion.CASCADE, to="collector.cluster")),
                        ("group", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="namespace_grants", to="auth.group")),
                    ],
                    options={
                        "db_table": "dashboard_namespacegrant",
                        "indexes": [models.Index(fields=["group", "cluster"], name="namespacegrant_group")],
                        "constraints": [models.UniqueConstraint(fields=("group", "cluster", "namespace"), name="namespacegrant_unique")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
