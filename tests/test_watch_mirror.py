"""The watch's mirror keeps what a complete listing keeps, whatever order the changes arrive in.

Random cluster states over a small universe where the relevance filter matters (claims reserving
Pods that use no claim, Pods asking for a class's extended resource, Events about Pods by UID and
about claims by name, recreated objects with new UIDs), reached by watch events in random order or
by relists; after each, the mirror's batch leaves history holding exactly what a listing of that
state stores (``relevance.keep_relevant``, ``normalize``), and changes nothing it need not.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.kinds import KINDS
from collector.mirror import Mirror, api_key
from collector.normalize import normalize
from collector.relevance import keep_relevant

T0 = datetime(2026, 5, 1, tzinfo=UTC)
PODS, CLAIMS, EVENTS = 4, 3, 5
RESOURCE = "example.com/gpu"


def _pod(i: int, incarnation: int, uses: bool, asks: bool, label: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if asks:
        container["resources"] = {"limits": {RESOURCE: "1"}}
    spec: dict[str, Any] = {"containers": [container]}
    if uses:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c{i % CLAIMS}"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "a", "name": f"p{i}", "uid": f"pod-{i}-{incarnation}", "labels": {"v": str(label)}},
        "spec": spec,
    }


def _claim(i: int, incarnation: int, reserves: list[str], label: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "a", "name": f"c{i}", "uid": f"claim-{i}-{incarnation}", "labels": {"v": str(label)}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": uid} for uid in reserves]},
    }


def _event(i: int, about: tuple[str, str, str | None], message: int) -> dict[str, Any]:
    kind, name, uid = about
    involved: dict[str, Any] = {"kind": kind, "namespace": "a", "name": name}
    if uid is not None:
        involved["uid"] = uid
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"namespace": "a", "name": f"e{i}", "uid": f"event-{i}"},
        "involvedObject": involved, "reason": "Test", "message": f"m{message}",
    }


@st.composite
def histories(draw: Any) -> list[list[dict[str, Any]]]:
    """A few cluster states, each moving a few things of the one before (most objects stay as they were)."""
    uids = [f"pod-{i}-{n}" for i in range(PODS) for n in (0, 1)]
    specs: dict[str, st.SearchStrategy[Any]] = {"class": st.tuples(st.booleans(), st.booleans())}
    for i in range(PODS):
        specs[f"p{i}"] = st.tuples(st.integers(0, 3), st.integers(0, 1), st.booleans(), st.booleans(), st.integers(0, 1))
    for i in range(CLAIMS):
        specs[f"c{i}"] = st.tuples(st.integers(0, 3), st.integers(0, 1),
                                   st.lists(st.sampled_from(uids), max_size=2, unique=True), st.integers(0, 1))
    abouts = st.one_of(
        st.tuples(st.just("Pod"), st.sampled_from([f"p{n}" for n in range(PODS)]), st.sampled_from(uids)),
        st.tuples(st.just("ResourceClaim"), st.sampled_from([f"c{n}" for n in range(CLAIMS)]),
                  st.none() | st.sampled_from([f"claim-{i}-{n}" for i in range(CLAIMS) for n in (0, 1)])),
    )
    for i in range(EVENTS):
        specs[f"e{i}"] = st.tuples(st.integers(0, 3), abouts, st.integers(0, 1))
    current = {name: draw(spec) for name, spec in specs.items()}
    states = []
    for _ in range(draw(st.integers(1, 6))):
        states.append(_state(current))
        for name, spec in specs.items():
            if draw(st.integers(0, 9)) < 2:
                current[name] = draw(spec)
    return states


def _state(specs: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "ns-a"}},
    ]
    present, extended = specs["class"]
    if present:
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                        "metadata": {"name": "gpu", "uid": "class-gpu"},
                        "spec": {"extendedResourceName": RESOURCE} if extended else {}})
    for i in range(PODS):
        there, incarnation, uses, asks, label = specs[f"p{i}"]
        if there:
            objects.append(_pod(i, incarnation, uses, asks, label))
    for i in range(CLAIMS):
        there, incarnation, reserves, label = specs[f"c{i}"]
        if there:
            objects.append(_claim(i, incarnation, reserves, label))
    for i in range(EVENTS):
        there, about, message = specs[f"e{i}"]
        if there:
            objects.append(_event(i, about, message))
    return objects


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for obj in objects:
        grouped[obj["kind"]].append(obj)
    return grouped


def listed_view(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """What a complete listing of ``objects`` stores: (kind, UID) → content hash."""
    view = {}
    for kind, items in keep_relevant(by_kind(objects), KINDS).items():
        for item in items:
            obj = normalize(kind, item)
            view[obj.key] = obj.content_hash
    return view


def written_view(mirror: Mirror) -> dict[tuple[str, str], str]:
    return {(kind, uid): head[0] for kind, heads in mirror.written.items() for uid, head in heads.items()}


def watch_events(before: list[dict[str, Any]], after: list[dict[str, Any]], kind: str) -> list[tuple[str, Any]]:
    """The events a watch of ``kind`` reports moving from ``before`` to ``after``."""
    old = {api_key(kind, o): o for o in before if o["kind"] == kind}
    new = {api_key(kind, o): o for o in after if o["kind"] == kind}
    events: list[tuple[str, Any]] = []
    for key, obj in old.items():
        if key not in new or new[key]["metadata"]["uid"] != obj["metadata"]["uid"]:
            events.append(("DELETED", obj))
    for key, obj in new.items():
        if key not in old or old[key]["metadata"]["uid"] != obj["metadata"]["uid"]:
            events.append(("ADDED", obj))
        elif old[key] != obj:
            events.append(("MODIFIED", obj))
    return events


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    histories(),
    st.lists(st.permutations(list(KINDS)), min_size=6, max_size=6),
    st.lists(st.sets(st.sampled_from(list(KINDS)), max_size=3), min_size=6, max_size=6),
)
def test_the_mirror_keeps_what_a_listing_keeps(
    sequence: list[list[dict[str, Any]]], orders: list[list[str]], relisted: list[set[str]]
) -> None:
    mirror = Mirror()
    before: list[dict[str, Any]] = []
    for step, state in enumerate(sequence):
        at = T0 + timedelta(minutes=step)
        grouped = by_kind(state)
        for kind in orders[step]:
            if step == 0 or kind in relisted[step]:
                mirror.replace(kind, grouped[kind], at)
            else:
                for event_type, obj in watch_events(before, state, kind):
                    mirror.apply(kind, event_type, obj, at)
        batch = mirror.take()
        previous = written_view(mirror)
        for change in batch.changes:  # nothing it need not write
            if change.obj is None:
                assert (change.kind, change.uid) in previous
            else:
                assert previous.get((change.kind, change.uid)) != change.obj.content_hash
            assert change.at == at
        mirror.committed(batch)
        assert written_view(mirror) == listed_view(state), f"step {step}"
        assert mirror.take().changes == []  # settled: nothing left to write
        before = state


def test_a_relist_records_a_missing_object_deleted_at_the_relists_time() -> None:
    mirror = Mirror()
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "ns-a"}}
    other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b", "uid": "ns-b"}}
    for kind in KINDS:
        mirror.replace(kind, [ns, other] if kind == "Namespace" else [], T0)
    mirror.committed(mirror.take())
    mirror.apply("Namespace", "MODIFIED", {**ns, "metadata": {**ns["metadata"], "labels": {"x": "1"}}},
                 T0 + timedelta(seconds=5))
    mirror.replace("Namespace", [{**ns, "metadata": {**ns["metadata"], "labels": {"x": "1"}}}],
                   T0 + timedelta(seconds=9))
    batch = mirror.take()
    changes = {(c.uid, c.obj is None): c.at for c in batch.changes}
    # the change that arrived keeps its time; the object the relist misses is gone as of the relist
    assert changes == {("ns-a", False): T0 + timedelta(seconds=5), ("ns-b", True): T0 + timedelta(seconds=9)}


def test_nothing_is_written_before_every_kind_is_listed() -> None:
    mirror = Mirror()
    mirror.replace("Namespace", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u"}}], T0)
    assert mirror.take().changes == []


def test_stored_history_is_reconciled_on_the_first_batch() -> None:
    state = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "ns-a"}}]
    kept = listed_view(state)
    stored = {"Namespace": {"ns-a": (kept[("Namespace", "ns-a")], "", "a"), "ns-gone": ("x", "", "gone")}}
    mirror = Mirror(stored)
    for kind in KINDS:
        mirror.replace(kind, state if kind == "Namespace" else [], T0)
    batch = mirror.take()
    assert [(c.kind, c.uid, c.obj) for c in batch.changes] == [("Namespace", "ns-gone", None)]


def test_a_list_converted_before_the_classes_changed_is_judged_with_the_classes_of_now() -> None:
    mirror = Mirror()
    for kind in KINDS:
        mirror.replace(kind, [], T0)
    pod = _pod(0, 0, uses=False, asks=True, label=0)
    stale = dict([mirror.hold("Pod", pod)])  # converted by a list's thread while no class served RESOURCE
    gpu = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu", "uid": "class-gpu"},
           "spec": {"extendedResourceName": RESOURCE}}
    mirror.apply("DeviceClass", "ADDED", gpu, T0 + timedelta(seconds=1))
    mirror.committed(mirror.take())
    mirror.replace_held("Pod", stale, T0 + timedelta(seconds=2))
    mirror.committed(mirror.take())
    assert set(mirror.written["Pod"]) == {"pod-0-0"}
