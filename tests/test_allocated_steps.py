"""The devices allocated over an earlier overview's chart, counted by PostgreSQL from the stored spans
(``derived.allocated_steps``), are what counting the spans' pieces in Python says
(``capacity.allocated_steps``): devices held by several spans at once count once, spans known only
after the snapshot do not count, spans ending after it are open there, and spans ending before the
window or as they start count nothing (issue 22: an earlier overview at 5,000 nodes loaded 30,000 spans).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from collector.history_reader import StoredHistory
from collector.models import Cluster
from demo import builders as b
from derived.allocated_steps import stored_steps
from derived.models import AllocationSpan, DerivedSnapshot
from derived.reading import overview_read
from derived.review import stored_allocations
from derived.thresholds import leak_thresholds
from domain.reports.capacity import AllocatedSteps, CachedHistory, allocated_steps
from domain.reports.redaction import Redactor, Scope
from tests.clusters import T0

pytestmark = pytest.mark.django_db

AS_OF = T0 + timedelta(hours=30)
SINCE = AS_OF - timedelta(hours=24)
DEVICES = [("gpu.example.com", f"node-{n}", f"gpu-{i}") for n in "ab" for i in range(3)]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """A cluster derived as of ``AS_OF`` whose inventory holds no device in part."""
    dump = tmp_path / "whole.json"
    dump.write_bytes(
        b.dump_json([b.node("node-a", T0), b.resource_slice("node-a", b.gpu_devices("node-a", 3), created=T0)])
    )
    call_command("import-snapshot", str(dump), "--at", AS_OF.isoformat())
    assert list(DerivedSnapshot.objects.values_list("held_in_part", flat=True)) == [False]
    return Cluster.objects.get()


def _moment(rng: random.Random) -> datetime:
    """A time around the window, on a coarse grid so that starts and ends meet."""
    return SINCE + timedelta(minutes=30 * rng.randint(-6, 54))


def _spans(cluster: Cluster, rng: random.Random, count: int) -> None:
    spans = []
    for i in range(count):
        start = _moment(rng)
        end = rng.choice([None, start, _moment(rng), start + timedelta(minutes=30 * rng.randint(1, 8))])
        if end is not None and end < start:
            start, end = end, start
        # Mostly known by the snapshot; some known only later (they must not count).
        seen = rng.choice([start, start, max(start, AS_OF - timedelta(hours=1)), AS_OF + timedelta(minutes=5)])
        driver, pool, device = rng.choice(DEVICES)
        spans.append(
            AllocationSpan(
                cluster=cluster,
                claim_uid=f"claim-{i}",
                namespace="team",
                name=f"claim-{i}",
                driver=driver,
                pool=pool,
                device=device,
                position=0,
                start=start,
                end=end,
                seen=seen,
            )
        )
    AllocationSpan.objects.bulk_create(spans)


def _changes(steps: AllocatedSteps) -> AllocatedSteps:
    """The steps where the count moves (the Python count has a step at every piece's time)."""
    return [s for i, s in enumerate(steps) if i == 0 or s[1] != steps[i - 1][1]]


def test_postgresql_counts_what_the_pieces_count(cluster: Cluster) -> None:
    rng = random.Random(22)
    shared = 0
    for _ in range(40):
        AllocationSpan.objects.all().delete()
        _spans(cluster, rng, rng.randint(0, 25))
        history = StoredHistory(cluster, AS_OF)
        for since in (SINCE, SINCE + timedelta(hours=7), AS_OF - timedelta(minutes=30)):
            _claims, pieces = stored_allocations(cluster.pk, False, CachedHistory(history), since, AS_OF, False)
            expected = _changes(allocated_steps(pieces, since, AS_OF))
            assert stored_steps(history, since) == expected, (since, pieces)
            shared += sum(
                1
                for p in pieces
                for q in pieces
                if p is not q and p.device == q.device and p.start < q.end and q.start < p.end
            )
    assert shared > 100  # not vacuous: devices held by several spans at once, often


def test_devices_held_in_part_are_counted_from_their_pieces(cluster: Cluster) -> None:
    DerivedSnapshot.objects.update(held_in_part=True)
    assert stored_steps(StoredHistory(cluster, AS_OF), SINCE) is None


def test_an_earlier_overview_reads_no_span(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    _spans(cluster, random.Random(7), 30)
    admin = Redactor(Scope(admin=True), ())
    with monkeypatch.context() as patched:  # the chart from the spans' pieces, as before
        patched.setattr("derived.reading.stored_steps", lambda *_args: None)
        from_pieces = overview_read(StoredHistory(cluster, AS_OF), admin, leak_thresholds())

    def refuse(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("the spans were loaded")

    monkeypatch.setattr("derived.review.stored_allocations", refuse)
    from_postgresql = overview_read(StoredHistory(cluster, AS_OF), admin, leak_thresholds())
    assert from_postgresql["series"] == from_pieces["series"]
    assert len({p["allocated"] for p in from_pieces["series"]}) > 3
