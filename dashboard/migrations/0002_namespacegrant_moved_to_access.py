# NamespaceGrant now belongs to the access app (access.0001): the dashboard forgets it, the table stays.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("dashboard", "0001_initial"),
        ("access", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="NamespaceGrant")],
            database_operations=[],
        ),
    ]
