from django.db import migrations

from derived.postgresql_only import on_postgresql

# match-devices compares the keys of the device rows valid at a snapshot with those it read last
# (derived.match_stock._keys): with the key in the as-of index, PostgreSQL reads the 40,000 keys of a
# 5,000-node snapshot from the index alone (7 ms), not from a scan of the documents' pages (24 ms). The
# same name and key columns, so Django's state of the index is unchanged. Only PostgreSQL: SQLite has no
# INCLUDE (Django warns, models.W040, when a model asks for it).
WITH_KEYS = (
    "DROP INDEX IF EXISTS inventorydevice_asof; "
    "CREATE INDEX inventorydevice_asof ON derived_inventorydevice (cluster_id, valid_to, valid_from) INCLUDE (id)"
)
WITHOUT_KEYS = (
    "DROP INDEX IF EXISTS inventorydevice_asof; "
    "CREATE INDEX inventorydevice_asof ON derived_inventorydevice (cluster_id, valid_to, valid_from)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("derived", "0027_pod_verdict_message"),
    ]

    operations = [migrations.RunPython(on_postgresql(WITH_KEYS), on_postgresql(WITHOUT_KEYS))]
