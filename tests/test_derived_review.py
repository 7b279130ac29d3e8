"""Allocation spans: what the derivation writes for the weekly review, and that rebuilding writes it again;
the current week's review rendered after a derivation, and when it stands for a later snapshot (a
past week's: tests/test_past_reviews.py).

That the review read from spans equals the review on read at every snapshot is checked with the
rest of the layer (tests/test_derived.py, tests/test_derived_equivalence.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from collector.history_reader import StoredHistory
from collector.models import Cluster, ObjectVersion, Snapshot
from demo import builders as b
from demo.story import DEMO_BASE, demo_snapshots
from derived.models import AllocationSpan, DerivedSnapshot, ReviewDocument
from derived.review import review_read
from derived.thresholds import leak_thresholds
from domain.cluster.timefmt import rfc3339
from domain.reports.capacity import allocation_stretches, week_containing
from domain.reports.leaks import Thresholds
from tests.clusters import T0, small_cluster
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


def _imported(dump: Path, objects: list[dict[str, Any]], at: datetime) -> None:
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())


def test_the_current_weeks_review_is_rendered_at_most_every_refresh_and_stands_meanwhile(
    tmp_path: Path, settings: Any
) -> None:
    settings.CLAIMLINE_REVIEW_REFRESH = 600
    objects, dump = small_cluster(), tmp_path / "cluster.json"
    week = week_containing(T0)
    _imported(dump, objects, T0)
    row = ReviewDocument.objects.get()
    assert (row.week_start, row.snapshot.at) == (week, T0)
    assert orjson.loads(row.document)["as_of"] == rfc3339(T0)

    cluster = Cluster.objects.get(name="demo")
    _imported(dump, objects, T0 + timedelta(minutes=5))  # only time moved
    assert ReviewDocument.objects.get().snapshot.at == T0
    later = StoredHistory(cluster, T0 + timedelta(minutes=5))
    assert review_read(later, week, leak_thresholds())["as_of"] == rfc3339(T0)
    # Another week, or other thresholds, is computed as of the snapshot asked about.
    assert review_read(later, week - timedelta(days=7), leak_thresholds())["as_of"] == rfc3339(later.as_of)
    short = Thresholds(orphaned=60, stuck_deletion=60, unreserved=60, held_by_failing_pod=60)
    assert review_read(later, week, short)["as_of"] == rfc3339(later.as_of)

    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    _imported(dump, objects, T0 + timedelta(minutes=6))  # a change within the interval: it still stands
    assert ReviewDocument.objects.get().snapshot.at == T0
    changed = StoredHistory(cluster, T0 + timedelta(minutes=6))
    assert review_read(changed, week, leak_thresholds())["as_of"] == rfc3339(T0)
    _imported(dump, objects, T0 + timedelta(minutes=10))  # the rendering is 600 s old
    assert ReviewDocument.objects.get().snapshot.at == T0 + timedelta(minutes=10)
    settings.CLAIMLINE_REVIEW_REFRESH = 0  # every snapshot rendered
    _imported(dump, objects, T0 + timedelta(minutes=11))
    assert ReviewDocument.objects.get().snapshot.at == T0 + timedelta(minutes=11)
    assert assert_review_matches_derivation("demo")["reviews"] > 0


def test_a_new_week_gets_its_own_review_and_the_ended_one_its_final_rendering(tmp_path: Path) -> None:
    objects, dump = small_cluster(), tmp_path / "cluster.json"
    _imported(dump, objects, T0)
    objects.append(b.namespace("team-next-week"))
    _imported(dump, objects, T0 + timedelta(days=7))
    rows = ReviewDocument.objects.order_by("week_start").values_list("week_start", "snapshot__at")
    # The week rendered as of T0 is rendered again as of the next week's first snapshot (tests/test_past_reviews.py).
    assert list(rows) == [
        (week_containing(T0), T0 + timedelta(days=7)),
        (week_containing(T0 + timedelta(days=7)), T0 + timedelta(days=7)),
    ]


def test_the_review_page_and_csv_read_the_stored_review(demo_history: Any, admin_client: Client) -> None:
    row = ReviewDocument.objects.get()
    doc = orjson.loads(row.document)
    doc["by_namespace"] = [{**doc["by_namespace"][0], "namespace": "read-from-the-stored-review"}]
    ReviewDocument.objects.filter(pk=row.pk).update(document=orjson.dumps(doc).decode())
    week = row.week_start.date().isoformat()
    page = admin_client.get("/c/demo/review/", {"week": week}, secure=True)
    assert "read-from-the-stored-review" in page.content.decode()
    csv = admin_client.get("/c/demo/review.csv", {"week": week}, secure=True)
    assert "read-from-the-stored-review" in csv.content.decode()


def test_a_stored_review_from_other_domain_code_is_not_served(demo_history: Any) -> None:
    cluster = Cluster.objects.get(name="demo")
    row = ReviewDocument.objects.get()
    ReviewDocument.objects.filter(pk=row.pk).update(document=orjson.dumps({"as_of": "stale"}).decode())
    DerivedSnapshot.objects.filter(snapshot=row.snapshot).update(version="other")
    review = review_read(StoredHistory(cluster), row.week_start, leak_thresholds())
    assert review["as_of"] != "stale"


def test_with_celery_the_review_is_rendered_by_a_task_of_its_own(tmp_path: Path, settings: Any) -> None:
    from derived.tasks import render_review

    settings.CLAIMLINE_SCHEDULER = "celery"
    objects, dump = small_cluster(), tmp_path / "cluster.json"
    _imported(dump, objects, T0)
    objects.append(b.namespace("team-later"))
    _imported(dump, objects, T0 + timedelta(minutes=1))
    assert DerivedSnapshot.objects.count() == 2 and not ReviewDocument.objects.exists()
    first, second = Snapshot.objects.order_by("at")
    assert render_review(first.pk) == "skipped"
    assert render_review(second.pk) == "rendered"
    assert render_review(second.pk) == "skipped"  # it stands
    assert ReviewDocument.objects.get().snapshot == second
