"""The weekly review classifies only the claims a leak condition held for (``derived.review.leak_suspects``):
the layer's leak candidates over the reviewed weeks, which also name the claims whose condition came and
went between two derived snapshots (``leaks.leak_candidates_between``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command

from collector.history_reader import StoredHistory
from collector.models import Cluster
from demo import builders as b
from derived.models import DerivedSnapshot, LeakCandidates
from derived.review import leak_suspects, stored_source
from domain.reports.capacity import WEEK, week_containing, weekly_review
from domain.reports.leaks import Thresholds
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db

FINISHED = T0 + timedelta(minutes=5)  # train-0's container ends, first seen an hour later
SEEN = T0 + timedelta(hours=1)
RELEASED = T0 + timedelta(hours=2)  # its claim is deleted: the condition ends
THRESHOLDS = Thresholds(orphaned=15 * 60)


def _imported(tmp_path: Path, objects: list[dict[str, Any]], at: Any) -> None:
    dump = tmp_path / "cluster.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())


def _finished(objects: list[dict[str, Any]]) -> None:
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "train-0")
    started = T0 - timedelta(hours=2)
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"][0]["state"] = b.state_terminated(started, FINISHED)


def _json(doc: dict[str, Any]) -> Any:
    return orjson.loads(orjson.dumps(doc))


def _review(at: Any, stored: bool) -> dict[str, Any]:
    history = StoredHistory(Cluster.objects.get(name="demo"), at)
    if not stored:
        return weekly_review(history, week_containing(at), THRESHOLDS)
    source = stored_source(history)
    assert source is not None
    return weekly_review(history, week_containing(at), THRESHOLDS, allocations=source)


def test_a_condition_between_two_derived_snapshots_is_still_classified(tmp_path: Path, settings: Any) -> None:
    objects = small_cluster()
    _imported(tmp_path, objects, T0)
    # The Pod's end is stored in a batch no derivation covers alone ...
    settings.CLAIMLINE_DERIVE = False
    _finished(objects)
    _imported(tmp_path, objects, SEEN)
    # ... and its claim is gone by the next derived snapshot, which covers both batches.
    settings.CLAIMLINE_DERIVE = True
    objects = [o for o in objects if not (o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "train-0-gpu")]
    _imported(tmp_path, objects, RELEASED)
    assert list(DerivedSnapshot.objects.order_by("at").values_list("at", "coalesced")) == [(T0, 0), (RELEASED, 1)]

    on_read = _review(RELEASED, stored=False)
    # Orphaned from 15 minutes after the container ended until the claim was deleted.
    assert on_read["totals"]["leaked_device_hours"] == round(
        (RELEASED - FINISHED - timedelta(minutes=15)) / timedelta(hours=1), 2
    )
    assert [o["name"] for o in on_read["top_offenders"]] == ["train-0-gpu"]
    assert _json(_review(RELEASED, stored=True)) == _json(on_read)
    claim = b.object_uid("ResourceClaim", "team-a", "train-0-gpu")
    candidates = LeakCandidates.objects.get(valid_from=RELEASED).claim_uids.split()
    assert candidates == [claim]  # under a condition at the covered batch, though gone at the snapshot


def test_only_the_candidates_of_the_reviewed_weeks_are_classified(tmp_path: Path, settings: Any) -> None:
    settings.CLAIMLINE_UNRESERVED_AFTER = 60
    objects = small_cluster()
    _imported(tmp_path, objects, T0)
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    _imported(tmp_path, objects, SEEN)
    cluster = Cluster.objects.get(name="demo")
    since = week_containing(T0) - 7 * WEEK
    assert leak_suspects(cluster.pk, since, T0) == set()
    assert leak_suspects(cluster.pk, since, SEEN) == {claim["metadata"]["uid"]}
    assert leak_suspects(cluster.pk, SEEN + timedelta(seconds=1), SEEN) == {claim["metadata"]["uid"]}

    # A full derivation after the window's start by this code, not the cluster's first snapshot: the
    # candidates before it are other code's (or none), so every claim is classified.
    DerivedSnapshot.objects.filter(at=SEEN).update(full=True)
    assert leak_suspects(cluster.pk, since, SEEN) is None
    assert leak_suspects(cluster.pk, SEEN, SEEN) == {claim["metadata"]["uid"]}
    # The cluster's first snapshot was derived in full: its candidates are complete from the start.
    assert leak_suspects(cluster.pk, since, T0) == set()
    DerivedSnapshot.objects.filter(at=T0).update(version="other")
    assert leak_suspects(cluster.pk, since, T0) is None
