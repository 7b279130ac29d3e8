"""One device's history from the derived layer: which claims to read, and which Events.

``device_history`` needs, of the whole history, only the claims that ever named the device and
the FailedPrepare* Events about the Pods that consumed them. Which claims held a device is
written only in the claims, and which Pod an Event is about only in the Event, so the layer
keeps two lookups, written as snapshots are derived:

- the claims that held the device: its ``AllocationSpan`` rows, and the ``AdminAccessResult``
  rows for the results with ``adminAccess`` that spans leave out (they hold nothing);
- the Events that were ever a preparation failure about a Pod: the ``EventSubject`` rows marked
  ``preparation_failure`` (``derived.event_lookups``, which the derivation reads too).

Both only say where to look: the answer is computed from those claims' and Events' versions
up to the asked time by the same domain code as on read, so a row too many changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from collector.history_reader import StoredHistory
from derived.event_lookups import failure_event_versions
from derived.models import AdminAccessResult, AllocationSpan
from derived.spans import claim_versions
from domain.cluster.state import Version
from domain.inventory.device_history import (
    DeviceIndex,
    consumers_of,
    device_history,
    holdings,
    preparation_failures,
)
from domain.inventory.devices import DeviceId, allocated_devices

BATCH = 2000


class AdminAccessRows:
    """The adminAccess results of the claims ``write_spans`` reads, kept in line like the spans:
    computed again from all the versions of each claim a snapshot changed (every claim at a full
    derivation), so deriving a snapshot twice writes the same rows."""

    def __init__(self) -> None:
        self._found: dict[str, dict[DeviceId, datetime]] = {}

    def observe(self, uid: str, versions: list[Version]) -> None:
        seen: dict[DeviceId, datetime] = {}
        for version in versions:
            if version.obj is not None:
                for result in allocated_devices(version.obj):
                    if result.admin_access:
                        seen.setdefault(result.id, version.at)
        self._found[uid] = seen

    def write(self, cluster_id: int, full: bool) -> int:
        """Bring the rows of the observed claims (every claim's when ``full``) in line; rows changed."""
        rows = AdminAccessResult.objects.filter(cluster_id=cluster_id)
        stored: dict[tuple[str, DeviceId], tuple[int, datetime]] = {}
        chosen = [rows] if full else [rows.filter(claim_uid__in=b) for b in _batches(sorted(self._found))]
        for query in chosen:
            for pk, uid, driver, pool, device, seen in query.values_list(
                "pk", "claim_uid", "driver", "pool", "device", "seen"
            ).iterator(BATCH):
                stored[(uid, (driver, pool, device))] = (pk, seen)
        new: list[AdminAccessResult] = []
        for uid, devices in self._found.items():
            for device_id, seen in devices.items():
                row = stored.pop((uid, device_id), None)
                if row is not None and row[1] == seen:
                    continue
                if row is not None:
                    stored[(uid, device_id)] = row  # seen moved: replaced below
                driver, pool, device = device_id
                new.append(
                    AdminAccessResult(
                        cluster_id=cluster_id, claim_uid=uid, driver=driver, pool=pool, device=device, seen=seen
                    )
                )
        gone = [pk for pk, _seen in stored.values()]
        for batch in _batches(gone):
            AdminAccessResult.objects.filter(pk__in=batch).delete()
        AdminAccessResult.objects.bulk_create(new, batch_size=BATCH)
        return len(new) + len(gone)


def forget_device_rows_from(cluster_id: int, at: datetime) -> None:
    """The lookups as they were before ``at``."""
    AdminAccessResult.objects.filter(cluster_id=cluster_id, seen__gte=at).delete()


def claims_that_named(cluster_id: int, device: DeviceId, as_of: datetime) -> list[str]:
    """The UIDs of the claims whose allocation named ``device`` in a version up to ``as_of``, one query."""
    driver, pool, name = device
    where: dict[str, Any] = {"cluster_id": cluster_id, "driver": driver, "pool": pool, "device": name}
    spans = AllocationSpan.objects.filter(seen__lte=as_of, **where).values_list("claim_uid", flat=True)
    admin = AdminAccessResult.objects.filter(seen__lte=as_of, **where).values_list("claim_uid", flat=True)
    return sorted(set(spans.union(admin)))


def device_history_of(history: StoredHistory, device: DeviceId) -> dict[str, Any]:
    """``device_history`` read through the lookups; only for a snapshot the layer covers."""
    cluster_id, as_of = history.cluster.pk, history.as_of
    held = holdings(claim_versions(cluster_id, claims_that_named(cluster_id, device, as_of), as_of))
    index = DeviceIndex(held, {})
    index.failures = preparation_failures(failure_event_versions(cluster_id, consumers_of(index, device), as_of))
    return device_history(history, device, index)


def _batches(items: list[Any]) -> list[list[Any]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
