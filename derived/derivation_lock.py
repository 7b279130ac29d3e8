"""One derivation per cluster at a time, without holding up the cluster's history writes.

A collection's and a rebuild's derivations of one cluster would interleave rows, so they take
turns. They used to take the cluster's row ``FOR UPDATE``, the lock the history writer takes too:
while a derivation ran (100–190 s for a first derivation at 5,000 nodes under load), the watcher's
next batch waited behind it, and a transition the API server sent in a second was stored minutes
later. Deriving snapshot S reads history as of S, which later writes never change (they only add
versions valid from later times), so only derivations need to exclude each other.

On PostgreSQL that is a transaction-scoped advisory lock on (this lock's class, the cluster's id):
released at commit or rollback as the row lock was, and invisible to the history writer. SQLite
serializes every writer on the whole database, so the row lock there is what it always was.
"""

from __future__ import annotations

from django.db import connection

from collector.models import Cluster

# The advisory lock's first key: names this lock among any others taken on the same database.
DERIVATION_LOCK_CLASS = 0x0DE21FED


def lock_derivations_of(cluster_id: int) -> None:
    """Wait until no other transaction derives ``cluster_id``; hold that until this one ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [DERIVATION_LOCK_CLASS, cluster_id])
        return
    Cluster.objects.select_for_update().filter(pk=cluster_id).first()
