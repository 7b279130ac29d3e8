"""Which snapshot a request about now reads: the newest stored, or, while the derivation catches up
with the batches a watcher stored meanwhile, the newest derived.

A watcher stores a batch a second and a derivation covers every batch stored since the last
(``derived.pending``), so on a busy cluster the newest snapshot is seconds ahead of the layer. Read
on its own, it would be computed from history on every request until derived: seconds per page at
5,000 nodes. A page about now reads the newest derived snapshot instead, when it is at most
``CLAIMLINE_READ_DERIVED_WITHIN`` seconds older (the page says its time); a page asked ``as_of`` a
time reads exactly that time's snapshot.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from collector.models import Cluster
from derived.models import DOMAIN_VERSION, DerivedSnapshot


def newest_readable(cluster: Cluster, newest: tuple[int, datetime]) -> tuple[int, datetime]:
    """The snapshot (key, time) a request about now reads, given the newest usable one."""
    if not settings.CLAIMLINE_DERIVE:
        return newest
    derived = (
        DerivedSnapshot.objects.filter(cluster=cluster)
        .order_by("-at")
        .values_list("snapshot_id", "at", "version")
        .first()
    )
    if derived is None or derived[0] == newest[0] or derived[2] != DOMAIN_VERSION:
        return newest
    if newest[1] - derived[1] > timedelta(seconds=settings.CLAIMLINE_READ_DERIVED_WITHIN):
        return newest  # the derivation is far behind (or stopped): history answers, however long it takes
    return derived[0], derived[1]
