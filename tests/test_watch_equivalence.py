"""Watching stores what polling stores, and a watcher killed at any moment loses nothing.

Cluster states drawn by hypothesis (fixed seed) from the demo story's stages, visited in any order,
each missing a few of its objects, at instants minutes apart, are served by the fake API server:

- once to a watcher (a batch per instant, and an empty snapshot where nothing changed: its checkpoint
  is due at each instant, as it is every collection interval in production) and once to a collection
  at each of the same instants: the stored versions (kind, UID, content hash, deletion, valid from,
  valid to) and every row the derived layer writes from them are the same;
- once to a watcher that runs throughout and once to one killed at a random step and moment (while
  the cluster changes, with the change arrived but not stored, in the middle of storing it, right after
  storing it) and started again: the same versions, so no transition is lost and none is stored twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.apps import apps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.collect import collect
from collector.kube import ClusterReader, api_client_for
from collector.models import Cluster, ObjectVersion, Snapshot
from collector.sources import ClusterSource
from collector.watch import Watcher
from demo.fake_apiserver import FakeApiServer, FakeCluster
from demo.story import DEMO_BASE, demo_stages
from derived.models import DocumentDictionary
from derived.pipeline import derive_after_write, derive_backlog
from tests.test_derivation_version import row_value
from tests.watching import Clock, make_watcher, settle

pytestmark = pytest.mark.django_db

STAGES = demo_stages(DEMO_BASE)
_names = itertools.count()
# Tied to this database's keys or to how documents are packed, not to what is derived.
SKIPPED_FIELDS = {"id", "cluster", "version", "dictionary", "subject"}


@st.composite
def histories(draw: Any) -> tuple[list[list[dict[str, Any]]], list[datetime]]:
    count = draw(st.integers(2, 5))
    states, times = [], []
    at = DEMO_BASE - timedelta(minutes=40)
    for _ in range(count):
        stage = STAGES[draw(st.integers(0, len(STAGES) - 1))]
        dropped = draw(st.sets(st.integers(0, len(stage) - 1), max_size=4))
        states.append([obj for i, obj in enumerate(stage) if i not in dropped])
        times.append(at)
        at += timedelta(minutes=draw(st.integers(1, 20)))
    return states, times


def versions(cluster: str) -> list[tuple[Any, ...]]:
    return sorted(
        ObjectVersion.objects.filter(cluster__name=cluster).values_list(
            "kind", "uid", "content_hash", "deleted", "valid_from", "valid_to"
        )
    )


def derived_rows(cluster: str) -> dict[str, list[bytes]]:
    """Every row the derived layer holds for ``cluster``, as canonical JSON, sorted within its table."""
    out = {}
    for model in apps.get_app_config("derived").get_models():
        if model is DocumentDictionary:
            continue
        fields = [f for f in model._meta.concrete_fields if f.name not in SKIPPED_FIELDS | {"overview"}]
        # A rendering's parts belong to the cluster through their rendering (OverviewNamespace).
        owner = "cluster__name" if any(f.name == "cluster" for f in model._meta.fields) else "overview__cluster__name"
        rows = model.objects.filter(**{owner: cluster}).select_related()
        out[model.__name__] = sorted(
            orjson.dumps({f.name: row_value(row, f) for f in fields}, option=orjson.OPT_SORT_KEYS) for row in rows
        )
    return out


def served(states: list[list[dict[str, Any]]]) -> FakeApiServer:
    server = FakeApiServer(FakeCluster(states), bookmark_interval=0.05)
    server.start()
    return server


def polled(server: FakeApiServer, tmp: Path, name: str, times: list[datetime]) -> None:
    path = tmp / f"kubeconfig-{name}"
    server.write_kubeconfig(path)
    source = ClusterSource(name, "kubeconfig", str(path))
    for stage, at in enumerate(times):
        server.cluster.set_stage(stage)
        reader = ClusterReader(api_client_for(source), page_size=20, sleep=lambda _s: None)
        snapshot = collect(source, at, lambda at=at: at, reader=reader)
        assert snapshot.status == "ok", snapshot.error
        derive_after_write(snapshot)


def watcher_for(server: FakeApiServer, tmp: Path, name: str, clock: Clock) -> Watcher:
    watcher = make_watcher(server, tmp, clock, name)
    watcher.after_write = lambda snapshot: derive_backlog(snapshot.cluster_id)  # as serve's derivation thread does
    watcher.start()
    return watcher


def watched(server: FakeApiServer, tmp: Path, name: str, times: list[datetime]) -> None:
    clock = Clock(times[0])
    watcher = watcher_for(server, tmp, name, clock)
    try:
        for stage, at in enumerate(times):
            clock.now = at
            server.cluster.set_stage(stage)
            settle(watcher, server)
            watcher.flush(checkpoint=True)
    finally:
        watcher.stop()


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(histories())
def test_watching_stores_and_derives_what_polling_does(tmp_path: Path, history: Any) -> None:
    states, times = history
    n = next(_names)
    server = served(states)
    try:
        polled(server, tmp_path, f"polled-{n}", times)
        server.cluster.set_stage(0)
        watched(server, tmp_path, f"watched-{n}", times)
    finally:
        server.stop()
    assert versions(f"watched-{n}") == versions(f"polled-{n}")
    rows = derived_rows(f"watched-{n}")
    assert len(rows["PodExplanation"]) > 5 and len(rows["DerivedSnapshot"]) == len(times)
    assert rows == derived_rows(f"polled-{n}")
    watch_runs = Snapshot.objects.filter(cluster__name=f"watched-{n}")
    assert [s.at for s in watch_runs.order_by("at")] == times
    assert all(s.source.startswith("watch ") and s.status == "ok" for s in watch_runs)


MOMENTS = ("while-changing", "arrived", "mid-write", "written")


class _Killed(Exception):
    pass


def _fail_once(original: Callable[..., Any]) -> Callable[..., Any]:
    calls = {"n": 0}

    def bulk_create(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise _Killed("the process died while storing the batch")
        return original(*args, **kwargs)

    return bulk_create


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(histories(), st.data())
def test_a_watcher_killed_at_any_moment_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path, history: Any, data: st.DataObject
) -> None:
    states, times = history
    step = data.draw(st.integers(0, len(times) - 1), label="killed at step")
    moment = data.draw(st.sampled_from(MOMENTS), label="moment")
    n = next(_names)
    steady, killed = f"steady-{n}", f"killed-{n}"
    server = served(states)
    try:
        watched(server, tmp_path, steady, times)
        server.cluster.set_stage(0)
        clock = Clock(times[0])
        watcher = watcher_for(server, tmp_path, killed, clock)
        for stage, at in enumerate(times):
            clock.now = at
            if stage == step and moment == "while-changing":
                watcher.stop(commit=False)  # killed: what it held is lost with it
                server.cluster.set_stage(stage)
                watcher = watcher_for(server, tmp_path, killed, clock)
                settle(watcher, server)
                watcher.flush(checkpoint=True)
                continue
            server.cluster.set_stage(stage)
            settle(watcher, server)
            if stage == step and moment == "arrived":
                watcher.stop(commit=False)
                watcher = watcher_for(server, tmp_path, killed, clock)
                settle(watcher, server)
            elif stage == step and moment == "mid-write":
                original = ObjectVersion.objects.bulk_create
                ObjectVersion.objects.bulk_create = _fail_once(original)  # type: ignore[method-assign]
                try:
                    with pytest.raises(_Killed):
                        watcher.flush(checkpoint=True)
                finally:
                    ObjectVersion.objects.bulk_create = original  # type: ignore[method-assign]
                watcher.stop(commit=False)
                watcher = watcher_for(server, tmp_path, killed, clock)
                settle(watcher, server)
            elif stage == step and moment == "written":
                watcher.after_write = lambda _s: None  # killed before its derivation
                watcher.flush(checkpoint=True)
                watcher.stop(commit=False)
                watcher = watcher_for(server, tmp_path, killed, clock)
                settle(watcher, server)
                assert watcher.flush() is None  # nothing to store twice
                continue
            watcher.flush(checkpoint=True)
        watcher.stop()
    finally:
        server.stop()
    assert versions(killed) == versions(steady)
    # the interrupted run leaves its dead write marked failed; what it derived matches the steady run's
    derive_backlog(Cluster.objects.get(name=killed).pk)
    assert not Snapshot.objects.filter(cluster__name=killed, status="running").exists()
    steady_docs, killed_docs = derived_rows(steady), derived_rows(killed)
    for table in ("PodExplanation", "AllocationSpan", "ClaimJudgement", "AuditReport", "LeakCandidates"):
        assert killed_docs[table] == steady_docs[table], table
