"""A derivation covers every batch stored since the last one (``derived.pending``): the watcher stores
batches whatever the derivation is doing, and deriving several batches as one leaves the layer as
deriving each would have, as of every snapshot it derived."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.db.models import Q
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claimline import watching as watch_pipeline
from collector.collect import collect
from collector.history_reader import StoredHistory
from collector.kube import ClusterReader, api_client_for
from collector.models import Cluster, Snapshot
from collector.recent_history import open_history
from collector.sources import ClusterSource
from demo import builders as b
from demo.fake_apiserver import FakeApiServer, FakeCluster
from derived.models import VERSIONED, AllocationSpan, DerivedSnapshot, EventSubject, PodExplanation
from derived.pipeline import derive_backlog
from derived.reading import stored_explain
from derived.reports import covers
from tests.clusters import T0, small_cluster
from tests.derived_checks import assert_layer_matches_derivation
from tests.test_derivation_version import row_value
from tests.test_watch_equivalence import SKIPPED_FIELDS, histories, served
from tests.watching import Clock, settle, watching

pytestmark = pytest.mark.django_db

_names = itertools.count()


def collected(server: FakeApiServer, tmp: Path, name: str, times: list[datetime], derive_at: set[int]) -> None:
    """Poll each of the server's stages at ``times``; derive the backlog only after the stages in ``derive_at``."""
    path = tmp / f"kubeconfig-{name}"
    server.write_kubeconfig(path)
    source = ClusterSource(name, "kubeconfig", str(path))
    cluster_id = None
    for stage, at in enumerate(times):
        server.cluster.set_stage(stage)
        reader = ClusterReader(api_client_for(source), page_size=20, sleep=lambda _s: None)
        snapshot = collect(source, at, lambda at=at: at, reader=reader)
        assert snapshot.status == "ok", snapshot.error
        cluster_id = snapshot.cluster_id
        if stage in derive_at:
            derive_backlog(cluster_id)


def _canonical(model: Any, rows: Any) -> list[bytes]:
    skipped = SKIPPED_FIELDS | {"valid_from", "valid_to", "content"}
    fields = [f for f in model._meta.concrete_fields if f.name not in skipped]
    return sorted(orjson.dumps({f.name: row_value(r, f) for f in fields}, option=orjson.OPT_SORT_KEYS) for r in rows)


def layer_at(cluster: str, at: datetime) -> dict[str, list[bytes]]:
    """What the layer answers as of ``at`` (the rows valid then), and every allocation span and Event
    subject, without the times a row began (a coalesced derivation writes them at its snapshot)."""
    valid = Q(valid_to__isnull=True) | Q(valid_to__gt=at)
    out = {
        m.__name__: _canonical(m, m.objects.filter(valid, cluster__name=cluster, valid_from__lte=at)) for m in VERSIONED
    }
    for model in (AllocationSpan, EventSubject):
        out[model.__name__] = _canonical(model, model.objects.filter(cluster__name=cluster))
    return out


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(histories(), st.data())
def test_deriving_a_backlog_as_one_leaves_what_deriving_each_leaves(
    tmp_path: Path, history: Any, data: st.DataObject
) -> None:
    states, times = history
    last = len(times) - 1
    skipped = data.draw(st.sets(st.integers(1, max(1, last - 1)), max_size=last), label="underived stages")
    n = next(_names)
    server = served(states)
    try:
        collected(server, tmp_path, f"each-{n}", times, set(range(len(times))))
        server.cluster.set_stage(0)
        collected(server, tmp_path, f"some-{n}", times, set(range(len(times))) - (skipped - {0, last}))
    finally:
        server.stop()
    some = Cluster.objects.get(name=f"some-{n}")
    derived = DerivedSnapshot.objects.filter(cluster=some)
    assert derived.count() == len(times) - len(skipped - {0, last})
    assert sum(derived.values_list("coalesced", flat=True)) == len(skipped - {0, last})
    # As of every snapshot it derived, the coalesced layer answers what deriving each snapshot does.
    for at in derived.values_list("at", flat=True):
        assert layer_at(f"some-{n}", at) == layer_at(f"each-{n}", at), at


def test_a_claim_held_and_released_between_two_derivations_has_its_span(tmp_path: Path, settings: Any) -> None:
    """Its Pod, created and deleted in the batches between, is judged as it was deleted; the held GPU's
    span starts and ends when the claim's versions say."""
    settings.CLAIMLINE_DERIVE = False
    stages = [small_cluster(), small_cluster(pods=4), small_cluster(), [*small_cluster(), b.namespace("team-b")]]
    times = [T0 + timedelta(minutes=10 * i) for i in range(len(stages))]
    for i, (at, objects) in enumerate(zip(times, stages, strict=True)):
        settings.CLAIMLINE_DERIVE = i in (0, len(stages) - 1)
        dump = tmp_path / f"s{i}.json"
        dump.write_bytes(b.dump_json(objects))
        call_command("import-snapshot", str(dump), "--at", at.isoformat(), "--cluster", "between")
    derived = DerivedSnapshot.objects.get(at=times[-1])
    assert derived.coalesced == 2 and not derived.full
    span = AllocationSpan.objects.get(name="train-3-gpu")
    assert span.start <= times[1] and (span.end, span.device) == (times[2], "gpu-1")
    pod = PodExplanation.objects.get(name="train-3", valid_to__isnull=True)
    assert not pod.live  # judged once more as deleted, at the derivation that covered the deletion
    assert assert_layer_matches_derivation("between", metrics=False, derived_only=True) > 0


def test_a_page_about_now_reads_the_newest_derived_snapshot_while_the_derivation_catches_up(
    tmp_path: Path, settings: Any, admin_client: Client
) -> None:
    for i, minutes in enumerate((0, 1)):
        settings.CLAIMLINE_DERIVE = i == 0  # the second is stored, not derived yet
        dump = tmp_path / f"now-{i}.json"
        dump.write_bytes(b.dump_json(small_cluster(pods=3 + i)))
        call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=minutes)).isoformat())
    settings.CLAIMLINE_DERIVE = True
    first, second = Snapshot.objects.order_by("at")
    assert open_history("demo", None).snapshot_pk == first.pk  # a minute behind: within the bound
    assert open_history("demo", (T0 + timedelta(minutes=1)).isoformat()).snapshot_pk == second.pk  # exact
    page = admin_client.get(f"/c/demo/pods/team-a/train-0/?shown={first.pk}", HTTP_HX_REQUEST="true")
    assert page.status_code == 204  # nothing newer to read yet
    settings.CLAIMLINE_READ_DERIVED_WITHIN = 30
    assert open_history("demo", None).snapshot_pk == second.pk  # too far behind: history answers
    history = StoredHistory(Cluster.objects.get(name="demo"))
    assert not covers(history) and stored_explain(history, "team-a", "train-3") is None
    settings.CLAIMLINE_READ_DERIVED_WITHIN = 120
    derive_backlog(first.cluster_id)
    assert open_history("demo", None).snapshot_pk == second.pk


@pytest.mark.django_db(transaction=True)  # the lane derives in a thread of its own
def test_batches_are_stored_while_a_derivation_runs_and_the_next_covers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    states = [small_cluster(), small_cluster(pods=4), [*small_cluster(pods=4), b.namespace("team-b")]]
    server = FakeApiServer(FakeCluster(states), bookmark_interval=0.05)
    server.start()
    gate, started = threading.Event(), threading.Event()
    real = watch_pipeline.derive_backlog

    def slow_derivation(cluster_id: int) -> Any:
        started.set()
        assert gate.wait(30)
        return real(cluster_id)

    clock = Clock(T0)
    try:
        with watching(server, tmp_path, clock) as watcher:
            assert watcher.cluster is not None
            derive_backlog(watcher.cluster.pk)  # the listed cluster, derived
            monkeypatch.setattr(watch_pipeline, "derive_backlog", slow_derivation)
            lane = watch_pipeline.DerivationLane(watcher.cluster.pk, clock)
            watcher.after_write = lane.submit
            stored = []
            for stage in (1, 2):
                clock.now = T0 + timedelta(minutes=stage)
                server.cluster.set_stage(stage)
                settle(watcher, server)
                stored.append(watcher.flush())
                assert started.wait(10)
            # both stored while the first one's derivation is still held up
            assert all(s is not None and s.changed for s in stored) and not lane.idle
            assert not DerivedSnapshot.objects.filter(snapshot__in=stored).exists()
            gate.set()
            assert lane.wait(60)
            lane.close()
    finally:
        server.stop()
    derived = DerivedSnapshot.objects.filter(snapshot__in=stored)
    assert list(derived.values_list("snapshot_id", "coalesced")) == [(stored[-1].pk, 1)]
    assert assert_layer_matches_derivation("watched", metrics=False, derived_only=True) > 0
