"""A past week's review: rendered once after the week ended, read by its page, CSV and e-mail, and
computed on read whenever that rendering may not stand (other thresholds, other domain code)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from demo import builders as b
from derived.models import DOMAIN_VERSION, DerivedSnapshot, ReviewDocument
from derived.review import review_read
from derived.thresholds import leak_thresholds
from domain.cluster.timefmt import rfc3339
from domain.reports.capacity import WEEK, week_containing, weekly_review
from domain.reports.leaks import Thresholds
from tests.clusters import T0, small_cluster
from tests.derived_checks import assert_review_matches_derivation

pytestmark = pytest.mark.django_db

WEEK_A = week_containing(T0)
NEXT = WEEK_A + WEEK + timedelta(hours=3)  # the first snapshot of the next week
SHORT = Thresholds(orphaned=60, stuck_deletion=60, unreserved=60, held_by_failing_pod=60)


def _imported(dump: Path, objects: list[dict[str, Any]], at: Any) -> None:
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())


def _history_across_a_week_boundary(tmp_path: Path) -> list[dict[str, Any]]:
    """Week A: the small cluster, then one claim unreserved (a leak to count); then the next week begins."""
    objects, dump = small_cluster(), tmp_path / "cluster.json"
    _imported(dump, objects, T0)
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    _imported(dump, objects, T0 + timedelta(hours=1))
    _imported(dump, objects, NEXT)
    return objects


def _rows() -> dict[Any, tuple[Any, str]]:
    return {row.week_start: (row.snapshot.at, row.version) for row in ReviewDocument.objects.select_related("snapshot")}


def _json(doc: dict[str, Any]) -> Any:
    return orjson.loads(orjson.dumps(doc))


def test_the_finished_week_is_rendered_as_of_the_first_snapshot_of_the_next_week(
    tmp_path: Path, settings: Any
) -> None:
    settings.CLAIMLINE_UNRESERVED_AFTER = 60  # the unreserved claim leaks within the history
    objects = _history_across_a_week_boundary(tmp_path)
    assert _rows() == {WEEK_A: (NEXT, DOMAIN_VERSION), WEEK_A + WEEK: (NEXT, DOMAIN_VERSION)}

    cluster = Cluster.objects.get(name="demo")
    stored = review_read(StoredHistory(cluster, NEXT), WEEK_A, leak_thresholds())
    on_read = weekly_review(StoredHistory(cluster, NEXT), WEEK_A, leak_thresholds())
    assert _json(stored) == _json(on_read) and stored["totals"]["leaked_device_hours"] > 0
    assert stored["week"]["partial"] is False

    # Later snapshots, changed or not, are served the same document; it is not rendered again.
    objects.append(b.namespace("team-later"))
    _imported(tmp_path / "cluster.json", objects, NEXT + timedelta(days=1))
    assert _rows()[WEEK_A] == (NEXT, DOMAIN_VERSION)
    later = StoredHistory(cluster, NEXT + timedelta(days=1))
    assert review_read(later, WEEK_A, leak_thresholds()) == stored
    # Other thresholds, or a rendering by other domain code: computed as of the asked snapshot.
    assert review_read(later, WEEK_A, SHORT)["as_of"] == rfc3339(later.as_of)
    ReviewDocument.objects.filter(week_start=WEEK_A).update(version="other")
    assert review_read(later, WEEK_A, leak_thresholds())["as_of"] == rfc3339(later.as_of)
    # Asked as of a snapshot before the rendering (still within week A): not the final document.
    assert review_read(StoredHistory(cluster, T0), WEEK_A, leak_thresholds())["as_of"] == rfc3339(T0)
    assert_review_matches_derivation("demo")


def test_a_past_weeks_page_and_csv_read_the_stored_review(tmp_path: Path, admin_client: Client, settings: Any) -> None:
    _history_across_a_week_boundary(tmp_path)
    row = ReviewDocument.objects.get(week_start=WEEK_A)
    doc = orjson.loads(row.document)
    doc["by_namespace"] = [{**doc["by_namespace"][0], "namespace": "read-from-the-final-review"}]
    ReviewDocument.objects.filter(pk=row.pk).update(document=orjson.dumps(doc).decode())
    week = WEEK_A.date().isoformat()
    for url in ("/c/demo/review/", "/c/demo/review.csv"):
        assert "read-from-the-final-review" in admin_client.get(url, {"week": week}, secure=True).content.decode()
    # Configured with other thresholds, the page computes it.
    settings.CLAIMLINE_ORPHANED_AFTER = 60
    page = admin_client.get("/c/demo/review/", {"week": week}, secure=True).content.decode()
    assert "read-from-the-final-review" not in page and "team-a" in page


def test_a_past_week_without_its_final_rendering_is_computed(tmp_path: Path, settings: Any) -> None:
    """With Celery the renderings are tasks: until the next week's first one runs, the week's row
    is the one rendered before it ended, which does not stand for a snapshot after its end."""
    from derived.tasks import render_review

    settings.CLAIMLINE_SCHEDULER = "celery"
    objects, dump = small_cluster(), tmp_path / "cluster.json"
    _imported(dump, objects, T0)
    first = Snapshot.objects.get()
    assert render_review(first.pk) == "rendered"
    _imported(dump, objects, NEXT)
    assert _rows() == {WEEK_A: (T0, DOMAIN_VERSION)}
    cluster = Cluster.objects.get(name="demo")
    assert review_read(StoredHistory(cluster, NEXT), WEEK_A, leak_thresholds())["as_of"] == rfc3339(NEXT)

    second = Snapshot.objects.get(at=NEXT)
    assert render_review(first.pk) == "skipped"
    assert render_review(second.pk) == "rendered"
    assert _rows() == {WEEK_A: (NEXT, DOMAIN_VERSION), WEEK_A + WEEK: (NEXT, DOMAIN_VERSION)}
    assert render_review(second.pk) == "skipped"


def test_rebuild_derived_renders_the_past_weeks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = _history_across_a_week_boundary(tmp_path)
    third = NEXT + WEEK
    _imported(tmp_path / "cluster.json", objects, third)
    rendered = _rows()
    assert set(rendered) == {WEEK_A, WEEK_A + WEEK, WEEK_A + 2 * WEEK}

    # History derived before past weeks' reviews were stored: every snapshot derived, no row.
    ReviewDocument.objects.all().delete()
    call_command("rebuild-derived")
    out = capsys.readouterr().out
    assert "every snapshot is derived already" in out
    assert f"rendered the review of the week of {WEEK_A.date()}" in out
    assert f"rendered the review of the week of {(WEEK_A + WEEK).date()}" in out
    assert {w: r for w, r in _rows().items() if w < week_containing(third)} == {
        w: r for w, r in rendered.items() if w < week_containing(third)
    }
    call_command("rebuild-derived")  # they stand: nothing rendered again
    assert "rendered the review" not in capsys.readouterr().out

    # Derived by other code: everything derived and rendered again, as before.
    DerivedSnapshot.objects.update(version="0123456789abcdef")
    ReviewDocument.objects.update(version="0123456789abcdef")
    call_command("rebuild-derived")
    assert _rows() == rendered
    assert_review_matches_derivation("demo")
