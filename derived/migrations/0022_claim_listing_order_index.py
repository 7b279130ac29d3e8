from django.db import migrations

from derived.postgresql_only import on_postgresql

# The claims list's order is by code point (Collate "C" on PostgreSQL, derived.reading.claim_listings):
# an index in that collation lets a snapshot's list be read in order (every claim at once, or a keyset
# page) instead of every valid row sorted; at 5,000 nodes that sort spilled to disk (~130 ms of the
# query). Not partial: a snapshot's rows are those valid at it, whether or not they are still open.
# Only PostgreSQL has the "C" collation by that name.
ORDER_INDEX = (
    'CREATE INDEX claimlisting_order ON derived_claimlisting (cluster_id, namespace COLLATE "C", '
    'name COLLATE "C", claim_uid COLLATE "C")'
)


class Migration(migrations.Migration):
    dependencies = [
        ("derived", "0021_claim_listing_entries"),
    ]

    operations = [
        migrations.RunPython(on_postgresql(ORDER_INDEX), on_postgresql("DROP INDEX IF EXISTS claimlisting_order"))
    ]
