"""JSON documents for the collector's public shapes (DESIGN.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.models import Snapshot


def snapshot_entry(s: Snapshot) -> dict[str, Any]:
    return {
        "id": s.pk,
        "cluster": s.cluster.name,
        "at": s.at.isoformat().replace("+00:00", "Z"),
        "source": s.source,
        "status": s.status,
        "objects_seen": s.objects_seen,
        "versions_written": s.versions_written,
        "deletions": s.deletions,
        "error": s.error,
    }


def snapshots_document(runs: Iterable[Snapshot]) -> dict[str, Any]:
    return {"snapshots": [snapshot_entry(s) for s in runs]}
