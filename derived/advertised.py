"""The inventory over time from what the derivation stored of each ResourceSlice version
(``AdvertisedSlice``): the overview's chart as of any snapshot without a slice decoded.

Counted on read, the chart's 24 hours decoded every slice live in them and counted each pool's devices:
4.0 s for an older snapshot's overview at 5,000 nodes. Each slice version's pool, creationTimestamp and
the devices its pool advertises when it is the only slice are facts of that version, known once it is
stored; the derivation writes them for the versions it has not counted (a few per slice change). A read
joins them to the versions' times and runs the same sweep (``slice_timeline.pool_changes``); only a pool
with several slices at once reads those slices. When a version in the window has no facts of this code
(stored before it, or counted by other domain code) the caller counts on read, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q

from collector.history_reader import StoredHistory, readable
from collector.models import ObjectVersion, Snapshot
from derived.models import DOMAIN_VERSION, AdvertisedSlice
from domain.cluster.state import Object
from domain.inventory.devices import slice_pool
from domain.inventory.slice_timeline import (
    AdvertisedTimeline,
    SliceFacts,
    advertised_from_facts,
    pool_units,
    slice_created,
)

BATCH = 2000
KIND = "ResourceSlice"


def write_advertised_slices(snapshot: Snapshot) -> int:
    """``AdvertisedSlice`` rows for the slice versions stored up to ``snapshot`` that this code has not
    counted yet; how many were written."""
    cluster_id = snapshot.cluster_id
    counted = AdvertisedSlice.objects.filter(cluster_id=cluster_id, version=DOMAIN_VERSION).values("object_version_id")
    rows = ObjectVersion.objects.filter(
        cluster_id=cluster_id, kind=KIND, deleted=False, valid_from__lte=snapshot.at
    ).exclude(pk__in=counted)
    facts: list[AdvertisedSlice] = []
    for pk, uid, at, content, checked in rows.values_list(
        "pk", "uid", "valid_from", "content", "shapes_checked"
    ).iterator(BATCH):
        obj = readable(KIND, uid, at, content, checked)
        if obj is None:
            facts.append(
                AdvertisedSlice(object_version_id=pk, cluster_id=cluster_id, readable=False, version=DOMAIN_VERSION)
            )
            continue
        driver, pool = slice_pool(obj)
        alone = len(pool_units(at, {uid: obj}))
        facts.append(
            AdvertisedSlice(
                object_version_id=pk,
                cluster_id=cluster_id,
                driver=driver,
                pool=pool,
                created=slice_created(obj),
                alone=alone,
                version=DOMAIN_VERSION,
            )
        )
    AdvertisedSlice.objects.bulk_create(
        facts,
        BATCH,
        update_conflicts=True,
        unique_fields=["object_version"],
        update_fields=["driver", "pool", "created", "alone", "readable", "version"],
    )
    return len(facts)


def stored_advertised(history: StoredHistory, start: datetime) -> AdvertisedTimeline | None:
    """Physical devices advertised from ``start`` to the history's time, at every slice change (as
    ``capacity.InventoryTimeline`` counts them); None when a version in the window was not counted."""
    read = _moving_facts(history, start) if connection.vendor == "postgresql" else _facts(history, start)
    if read is None:
        return None
    steady, rows = read
    versions: dict[str, list[tuple[datetime, SliceFacts | None]]] = {}
    for pk, uid, at, deleted, version, ok, driver, pool, created, alone in rows:
        if deleted:
            versions.setdefault(uid, []).append((at, None))
        elif version != DOMAIN_VERSION:
            return None
        elif ok:  # a version that cannot be read is left out, as the history leaves it out
            versions.setdefault(uid, []).append((at, SliceFacts((driver, pool), created, alone, pk)))
    # A pool with several slices at once is counted from those slices, read in one query: a first
    # sweep names them (most pools have one slice, and then no sweep but the one).
    wanted: set[int] = set()

    def name_them(members: Sequence[SliceFacts]) -> int:
        wanted.update(m.version for m in members)
        return 0

    timeline = advertised_from_facts(versions, start, name_them)
    if wanted:
        timeline = advertised_from_facts(versions, start, _Several(wanted).count)
    return AdvertisedTimeline(timeline.times, [steady + n for n in timeline.totals]) if steady else timeline


# A slice version as the sweep reads it: its key, the slice's UID, the version's time, whether it is a
# deletion, then its facts (version, readable, driver, pool, created, alone; None where this code has
# not counted it).
FactsRow = tuple[Any, ...]


def _facts(history: StoredHistory, start: datetime) -> tuple[int, Iterable[FactsRow]]:
    """Every slice version live in the window, with its facts (none held apart as steady)."""
    rows = (
        ObjectVersion.objects.filter(cluster=history.cluster, kind=KIND, valid_from__lte=history.as_of)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .exclude(deleted=True, valid_from__lt=start)  # as ``all_versions(since=start)`` reads them
        .order_by("uid", "valid_from")
        .values_list(
            "pk",
            "uid",
            "valid_from",
            "deleted",
            "advertised__version",
            "advertised__readable",
            "advertised__driver",
            "advertised__pool",
            "advertised__created",
            "advertised__alone",
        )
    )
    return 0, rows.iterator(BATCH)


# The rows ``_facts`` reads, but a pool that does not move in the window is added up here rather than
# sent: one slice with one version in the window, counted by this code, advertising from the window's
# start on (stored by then, or first seen later but created by then: ``slice_timeline`` counts such a
# slice from its creation). At 5,000 nodes that is nearly every pool, and loading 5,000 versions' times
# and sweeping them was most of an earlier chart's time. The timeline then has no point where only such
# a slice was first seen: nothing changed there.
# The first row carries that sum and how many versions this code has not counted (the caller then
# counts the slices); the rest are the moving pools' versions, as ``_facts`` has them.
_MOVING = """
WITH live AS (
    SELECT v.id, v.uid, v.valid_from, v.deleted, f.version, f.readable, f.driver, f.pool, f.created, f.alone,
           COUNT(*) OVER (PARTITION BY v.uid) AS versions_of_slice
    FROM {versions} v LEFT JOIN {facts} f ON f.object_version_id = v.id
    WHERE v.cluster_id = %(cluster)s AND v.kind = %(kind)s AND v.valid_from <= %(as_of)s
      AND (v.valid_to IS NULL OR v.valid_to > %(start)s) AND NOT (v.deleted AND v.valid_from < %(start)s)
), pool AS (
    SELECT driver, pool, COUNT(*) AS versions_of_pool FROM live WHERE NOT deleted GROUP BY driver, pool
), marked AS (
    SELECT live.*, COALESCE(
        versions_of_slice = 1 AND versions_of_pool = 1 AND NOT deleted AND readable AND version = %(version)s
        AND (valid_from <= %(start)s OR created <= %(start)s), FALSE
    ) AS steady
    FROM live LEFT JOIN pool USING (driver, pool)
)
SELECT * FROM (
    SELECT 0 AS first, NULL::bigint, NULL, NULL::timestamptz, NULL::boolean, NULL, NULL::boolean, NULL, NULL,
           NULL::timestamptz, COALESCE(SUM(alone) FILTER (WHERE steady), 0)::integer,
           COUNT(*) FILTER (WHERE NOT deleted AND version IS DISTINCT FROM %(version)s)::integer
    FROM marked
    UNION ALL
    SELECT 1, id, uid, valid_from, deleted, version, readable, driver, pool, created, alone, NULL
    FROM marked WHERE NOT steady
) rows ORDER BY first, 3, 4
"""


def _moving_facts(history: StoredHistory, start: datetime) -> tuple[int, Iterable[FactsRow]] | None:
    """``_facts`` with the steady pools added up in PostgreSQL; None when a version in the window was
    not counted by this code."""
    params: dict[str, Any] = {
        "cluster": history.cluster.pk,
        "kind": KIND,
        "as_of": history.as_of,
        "start": start,
        "version": DOMAIN_VERSION,
    }
    sql = _MOVING.format(versions=ObjectVersion._meta.db_table, facts=AdvertisedSlice._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        (_first, *_none, steady, uncounted), *rows = cursor.fetchall()
    if uncounted:
        return None
    return steady, [row[1:11] for row in rows]


class _Several:
    """The physical devices of pools with several slices, counted from those slices read once."""

    def __init__(self, wanted: set[int]) -> None:
        self._slices: dict[int, tuple[str, datetime, Object]] = {}
        rows = ObjectVersion.objects.filter(pk__in=sorted(wanted))
        for pk, uid, at, content, checked in rows.values_list("pk", "uid", "valid_from", "content", "shapes_checked"):
            obj = readable(KIND, uid, at, content, checked)
            if obj is not None:
                self._slices[pk] = (uid, at, obj)
        self._counted: dict[frozenset[int], int] = {}

    def count(self, members: Sequence[SliceFacts]) -> int:
        key = frozenset(m.version for m in members)
        if key not in self._counted:
            found = [self._slices[pk] for pk in sorted(key) if pk in self._slices]
            slices = {uid: obj for uid, _at, obj in found}
            self._counted[key] = len(pool_units(max(at for _u, at, _o in found), slices)) if found else 0
        return self._counted[key]
