from django.db import migrations

from derived.postgresql_only import on_postgresql

# match-devices' pages read the devices valid at a snapshot in (driver, pool, device) order by code point
# (Collate "C" on PostgreSQL, derived.match_stock.stored_page): an index in that collation lets a page be
# read from where the last one ended (a keyset query) instead of every device row sorted. Not partial: a
# snapshot's rows are those valid at it, whether or not they are still open. Only PostgreSQL has the "C"
# collation by that name.
KEY_INDEX = (
    'CREATE INDEX inventorydevice_key ON derived_inventorydevice (cluster_id, driver COLLATE "C", '
    'pool COLLATE "C", device COLLATE "C")'
)


class Migration(migrations.Migration):
    dependencies = [
        ("derived", "0024_inventory_usage_unavailable"),
    ]

    operations = [
        migrations.RunPython(on_postgresql(KEY_INDEX), on_postgresql("DROP INDEX IF EXISTS inventorydevice_key"))
    ]
