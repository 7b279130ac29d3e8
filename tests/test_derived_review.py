"""Allocation spans: what the derivation writes for the weekly review, and that rebuilding writes it again.

That the review read from spans equals the review on read at every snapshot is checked with the
rest of the layer (tests/test_derived.py, tests/test_derived_equivalence.py).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from collector.models import Cluster, ObjectVersion
from dashboard.domain.capacity import allocation_stretches
from dashboard.history import StoredHistory
from demo import builders as b
from demo.story import DEMO_BASE, demo_snapshots
from derived.models import AllocationSpan, DerivedSnapshot
from tests.clusters import small_cluster
from tests.derived_checks import assert_review_matches_derivation

pytestmark = pytest.mark.django_db

FIELDS = ("claim_uid", "namespace", "name", "driver", "pool", "device", "position", "start", "end", "seen")


def _spans() -> list[tuple[Any, ...]]:
    return sorted(AllocationSpan.objects.values_list(*FIELDS))


def test_spans_are_the_claims_allocation_stretches(demo_history: Any) -> None:
    cluster = Cluster.objects.get(name="demo")
    history = StoredHistory(cluster)
    claims = history.all_versions("ResourceClaim")
    expected = sorted(
        (uid, start, end if end < history.as_of else None, device)
        for uid, versions in claims.items()
        for start, end, devices in allocation_stretches(versions, history.as_of)
        for device in devices
    )
    stored = sorted(
        (uid, start, end, (driver, pool, device))
        for uid, start, end, driver, pool, device in AllocationSpan.objects.values_list(
            "claim_uid", "start", "end", "driver", "pool", "device"
        )
    )
    assert stored == expected and stored
    # A deleted claim's span ends at its deletion; a held one stays open.
    deleted = set(ObjectVersion.objects.filter(kind="ResourceClaim", deleted=True).values_list("uid", flat=True))
    assert any(uid in deleted and end is not None for uid, _s, end, _d in stored)
    assert any(end is None for _u, _s, end, _d in stored)


def test_rebuild_derived_writes_the_same_spans(demo_history: Any, capsys: pytest.CaptureFixture[str]) -> None:
    derived = _spans()
    assert derived

    # From the third snapshot on: later spans dropped, ended ones reopened, then derived again.
    times = list(DerivedSnapshot.objects.order_by("at").values_list("at", flat=True))
    DerivedSnapshot.objects.filter(at__gte=times[2]).update(version="0123456789abcdef")
    call_command("rebuild-derived")
    assert "[3/3]" in capsys.readouterr().out
    assert _spans() == derived

    # Everything again (the first snapshot derives every claim), and once more: nothing to do.
    DerivedSnapshot.objects.update(version="0123456789abcdef")
    call_command("rebuild-derived")
    assert "[5/5]" in capsys.readouterr().out
    assert _spans() == derived
    call_command("rebuild-derived", "--cluster", "demo")
    assert "every snapshot is derived already" in capsys.readouterr().out
    assert _spans() == derived
    assert assert_review_matches_derivation("demo")["reviews"] > 0


def test_a_dropped_layer_gets_the_same_spans_when_rebuilt(demo_history: Any) -> None:
    derived = _spans()
    AllocationSpan.objects.all().delete()
    DerivedSnapshot.objects.all().delete()
    call_command("rebuild-derived")
    assert _spans() == derived


def test_held_in_part_follows_the_inventory(tmp_path: Path) -> None:
    """Whole GPUs, then the demo's inventory (a partitioned H100, a shared L40S), then whole GPUs again:
    the flag follows each inventory change, and the review equals the on-read one throughout."""
    demo_at, demo_objects = demo_snapshots(DEMO_BASE)[-1]
    stages = [
        (demo_at - timedelta(hours=2), small_cluster(demo_at - timedelta(hours=2))),
        (demo_at, demo_objects),
        (demo_at + timedelta(hours=1), small_cluster(demo_at + timedelta(hours=1))),
    ]
    for i, (at, objects) in enumerate(stages):
        dump = tmp_path / f"flip-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat(), "--cluster", "flip")
    flags = DerivedSnapshot.objects.filter(cluster__name="flip").order_by("at").values_list("held_in_part", flat=True)
    assert list(flags) == [False, True, False]
    compared = assert_review_matches_derivation("flip")
    assert compared["allocated"] > 0 and compared["equivalent"] < compared["allocated"]
