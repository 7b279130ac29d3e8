"""The bundled demo cluster, read through the fake API server like any cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from claimline.pipeline import run_collection
from collector.models import Snapshot
from demo.story import stage_times

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_first_collection_replays_the_story_then_reads_the_last_stage() -> None:
    run_collection("demo", NOW, lambda: NOW)
    runs = list(Snapshot.objects.order_by("at"))
    assert [r.at for r in runs] == stage_times(NOW)
    assert all(r.status == "ok" for r in runs), [r.error for r in runs]
    assert runs[0].versions_written > 0
    assert sum(r.deletions for r in runs) > 0  # the finished Job's Pod disappears
    later = run_collection("demo", NOW + timedelta(seconds=30), lambda: NOW)
    assert (later.status, later.versions_written, later.deletions) == ("ok", 0, 0)
