"""The devices advertised over time from the facts the derivation stored of each slice version
(``derived.advertised``) are what counting the slices says (``capacity.InventoryTimeline``), at every
change and from any start: slices first seen after their creation, pools with several slices (a
partitioned GPU's counter slice), pools deleted and changed. An older snapshot's overview then decodes
no slice (issue 22: 4.0 s at 5,000 nodes, 80% of it counting the chart's slices)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

import derived.advertised
import domain.reports.capacity
from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from demo import builders as b
from derived.advertised import stored_advertised
from derived.models import AdvertisedSlice
from derived.reading import overview_read
from derived.thresholds import leak_thresholds
from domain.reports.capacity import InventoryTimeline
from domain.reports.overview import overview
from domain.reports.redaction import Redactor, Scope
from tests.clusters import T0

pytestmark = pytest.mark.django_db

STEP = timedelta(minutes=10)


def node_slice(node: str, count: int, created: datetime, **kwargs: Any) -> dict[str, Any]:
    return b.resource_slice(node, b.gpu_devices(node, count), created=created, **kwargs)


def partitioned(node: str, created: datetime) -> list[dict[str, Any]]:
    """A partitioned H100: a counter slice and a device slice of one pool (two slices at once)."""
    counters, devices = b.partitioned_gpu(node, partitions=3)
    return [
        b.counter_slice(node, [counters], created=created),
        b.resource_slice(node, devices, slice_count=2, created=created),
    ]


def stages() -> list[tuple[datetime, list[dict[str, Any]]]]:
    """Six collections ``STEP`` apart. The first lists slices created long before history began;
    ``late`` is created between the second and third and first seen at the fourth; ``half`` is a
    two-slice pool whose second slice arrives late, then goes; ``b`` grows, then is deleted."""
    early = T0 - timedelta(days=2)
    base = [b.node(f"node-{n}", early) for n in "abcdp"]
    a, p = node_slice("node-a", 8, early), partitioned("node-p", early)
    half = [
        b.resource_slice(
            None, b.gpu_devices("pool-h", 2), pool="half", slice_count=2, all_nodes=True, created=early, name="half-1"
        )
    ]
    other = b.resource_slice(
        None, b.gpu_devices("pool-h2", 2), pool="half", slice_count=2, all_nodes=True, created=T0 + STEP, name="half-2"
    )
    late = node_slice("node-c", 4, T0 + STEP + timedelta(minutes=3))
    return [
        (T0, [*base, a, *p, *half, node_slice("node-b", 2, early)]),
        (T0 + STEP, [*base, a, *p, *half, other, node_slice("node-b", 4, early)]),
        (T0 + 2 * STEP, [*base, a, *p, *half, other, node_slice("node-b", 4, early), node_slice("node-d", 1, T0)]),
        (T0 + 3 * STEP, [*base, a, *p, *half, other, node_slice("node-b", 4, early), late]),
        (T0 + 4 * STEP, [*base, a, *p, *half, late]),
        (T0 + 5 * STEP, [*base, *p, *half, late]),
    ]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    for i, (at, objects) in enumerate(stages()):
        (tmp_path / f"{i}.json").write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(tmp_path / f"{i}.json"), "--at", at.isoformat())
    return Cluster.objects.get()


def counted(history: StoredHistory, start: datetime) -> tuple[list[datetime], list[int]]:
    timeline = InventoryTimeline.build(history, start)
    return timeline.times, [sum(c.values()) for c in timeline.counts]


def changes(times: list[datetime], totals: list[int]) -> list[tuple[datetime, int]]:
    """The times the count moves (a steady pool's slice first seen in the window moves nothing)."""
    return [(t, n) for i, (t, n) in enumerate(zip(times, totals, strict=True)) if i == 0 or n != totals[i - 1]]


def test_the_stored_facts_count_what_the_slices_count(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    assert AdvertisedSlice.objects.filter(readable=True).count() > 0
    seen = set()
    steady: set[int] = set()  # devices of the pools PostgreSQL added up rather than sent
    for snapshot in Snapshot.objects.filter(cluster=cluster).order_by("at"):
        history = StoredHistory(cluster, snapshot.at)
        for start in (T0 - timedelta(days=1), T0 - timedelta(minutes=1), T0, T0 + STEP + timedelta(minutes=5)):
            if start > snapshot.at:
                continue
            stored = stored_advertised(history, start)
            assert stored is not None
            times, totals = counted(history, start)
            assert changes(stored.times, stored.totals) == changes(times, totals), (snapshot.at, start)
            for t in [*times, snapshot.at]:
                assert stored.advertised(t) == InventoryTimeline.build(history, start).advertised(t)
            # Every version sent to the sweep (as SQLite reads them) counts the same.
            with monkeypatch.context() as every_version:
                every_version.setattr(derived.advertised, "_moving_facts", derived.advertised._facts)
                swept = stored_advertised(history, start)
                assert swept is not None and (swept.times, swept.totals) == (times, totals)
            held = derived.advertised._moving_facts(history, start)
            assert held is not None
            steady.add(held[0])
            seen.add(tuple(totals))
    # Not vacuous: the late slice counts from the change after its creation, before it was first seen;
    # and the totals moved with every stage.
    last = StoredHistory(cluster, T0 + 5 * STEP)
    times, totals = counted(last, T0 - timedelta(days=1))
    assert times == [T0 - timedelta(days=1), T0, T0 + STEP, T0 + 2 * STEP, T0 + 3 * STEP, T0 + 4 * STEP, T0 + 5 * STEP]
    assert totals[3] - totals[2] == 4  # at the change after its creation: the late slice's four GPUs
    without_d = counted(StoredHistory(cluster, T0 + STEP), T0 - timedelta(days=1))[1]
    assert totals[1] - without_d[1] == 1  # node-d, first seen at the third stage, was created at T0
    assert len(set(totals)) >= 5 and len(seen) > 5
    assert len(steady) > 2 and 0 in steady  # pools held apart, and windows where every pool moved


def test_without_facts_of_this_code_the_slices_are_counted(cluster: Cluster) -> None:
    history = StoredHistory(cluster, T0 + 5 * STEP)
    # node-b's second version (T0 + STEP until its deletion at T0 + 4 STEP) counted by other code.
    stale = AdvertisedSlice.objects.filter(
        object_version__valid_from=T0 + STEP, object_version__name__startswith="node-b"
    )
    assert stale.update(version="older-code") == 1
    assert stored_advertised(history, T0) is None
    assert stored_advertised(history, T0 + 4 * STEP + timedelta(minutes=1)) is not None  # not in this window


def test_an_older_snapshots_overview_counts_no_slice(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    history = StoredHistory(cluster, T0 + 3 * STEP)
    admin = Redactor(Scope(admin=True), ())
    on_read = overview(history, admin, leak_thresholds())

    def refuse(*_args: Any) -> Any:
        raise AssertionError("the slices were counted on read")

    monkeypatch.setattr(domain.reports.capacity.InventoryTimeline, "build", refuse)
    from_layer = overview_read(StoredHistory(cluster, T0 + 3 * STEP), admin, leak_thresholds())
    assert from_layer["series"] == on_read["series"]
    assert [p["advertised"] for p in on_read["series"]][:2] != [p["advertised"] for p in on_read["series"]][-1:]
