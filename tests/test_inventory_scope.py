"""A ResourceSlice change re-derives only the counted Pods holding a device of a changed pool, a Node
change that kept its labels none, and a Node added, removed or relabelled only the counted Pods whose
allocations select their node by labels (derived.inventory_scope); verdicts stay exactly what the domain
derives on read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from demo import builders as b
from derived.models import DerivedSnapshot, PodExplanation
from tests.clusters import T0, small_cluster
from tests.derived_checks import assert_layer_matches_derivation

pytestmark = pytest.mark.django_db

Objects = list[dict[str, Any]]


def _replace(objects: Objects, kind: str, name_prefix: str, new: dict[str, Any] | None) -> Objects:
    """``objects`` with the one ``kind`` whose name starts with ``name_prefix`` replaced (None: removed)."""
    out = []
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"].startswith(name_prefix):
            if new is not None:
                out.append(new)
        else:
            out.append(obj)
    return out


def _slice(node: str, **device_kwargs: Any) -> dict[str, Any]:
    created = T0 - timedelta(days=30)
    return b.resource_slice(node, b.gpu_devices(node, 4, **device_kwargs), created=created)


def _import(tmp_path: Path, objects: Objects, minutes: int) -> DerivedSnapshot:
    dump = tmp_path / f"cluster-{minutes}.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(minutes=minutes)).isoformat())
    return DerivedSnapshot.objects.order_by("-at").first()  # type: ignore[return-value]


def _rejudged(derived: DerivedSnapshot) -> set[str]:
    """The Pods (by name) whose rows this derivation wrote."""
    rows = PodExplanation.objects.filter(valid_from=derived.at)
    return set(rows.values_list("name", flat=True))


HISTORY: list[tuple[str, Callable[[Objects], Objects], set[str] | None]] = [
    # A device attribute changes in worker-1's pool: only the Pods holding devices there.
    (
        "attribute",
        lambda o: _replace(o, "ResourceSlice", "worker-1", _slice("worker-1", driver_version="580.200.1")),
        {"train-1", "train-3"},
    ),
    # A NoExecute taint on a held device of worker-0's pool: the Pods of that pool.
    (
        "taint",
        lambda o: _replace(
            o,
            "ResourceSlice",
            "worker-0",
            b.resource_slice(
                "worker-0",
                [
                    b.gpu_device("gpu-0", node="worker-0", taints=[b.taint("gpu.example/ecc", "NoExecute")]),
                    *b.gpu_devices("worker-0", 4)[1:],
                ],
                created=T0 - timedelta(days=30),
            ),
        ),
        {"train-0", "train-2"},
    ),
    # worker-1's slice is deleted while its claims still hold devices in it.
    ("deleted", lambda o: _replace(o, "ResourceSlice", "worker-1", None), {"train-1", "train-3"}),
    # A node's status moves (a heartbeat), its name and labels kept: no counted Pod reads it.
    (
        "heartbeat",
        lambda o: _replace(
            o, "Node", "worker-1", b.node("worker-1", T0 - timedelta(days=30), heartbeat=T0 + timedelta(minutes=4))
        ),
        set(),
    ),
    # A node relabelled: only a label-selected allocation's node may move, and every allocation here is
    # pinned to its node by name (as kube-scheduler writes a node-local device's), so no counted Pod.
    (
        "relabel",
        lambda o: _replace(
            o, "Node", "worker-0", b.node("worker-0", T0 - timedelta(days=30), labels={"rack": "r2"}, heartbeat=T0)
        ),
        set(),
    ),
]


def test_slice_changes_rederive_only_the_pods_holding_devices_in_their_pools(tmp_path: Path) -> None:
    objects = small_cluster(pods=4)
    first = _import(tmp_path, objects, 0)
    counted = set(PodExplanation.objects.filter(valid_to__isnull=True, counted=True).values_list("name", flat=True))
    assert first.full and {"train-0", "train-1", "train-2", "train-3"} <= counted
    for minutes, (what, change, expected) in enumerate(HISTORY, start=1):
        objects = change(objects)
        derived = _import(tmp_path, objects, minutes)
        assert not derived.full, what
        rejudged = _rejudged(derived)
        if expected is None:
            assert derived.pods_derived == len(counted), what
        else:
            assert derived.pods_derived == len(expected), (what, rejudged)
            # Rows change only where a verdict's document did; none outside the touched pool.
            assert rejudged <= expected, (what, rejudged)
    assert assert_layer_matches_derivation("demo") > 0


def test_a_slice_change_without_node_objects_rederives_every_counted_pod(tmp_path: Path) -> None:
    """Without Nodes, the nodes are read from every slice: a slice change is not bounded by its pool."""
    objects = [o for o in small_cluster(pods=4) if o["kind"] != "Node"]
    _import(tmp_path, objects, 0)
    counted = PodExplanation.objects.filter(valid_to__isnull=True, counted=True).count()
    objects = _replace(objects, "ResourceSlice", "worker-1", _slice("worker-1", driver_version="580.200.1"))
    derived = _import(tmp_path, objects, 1)
    assert derived.pods_derived == counted
    assert assert_layer_matches_derivation("demo") > 0


def _admin_pod(node: str) -> Objects:
    """A running Pod in an admin-access namespace whose claim reaches ``node``'s gpu-0 with adminAccess (no span)."""
    started = T0 - timedelta(hours=1)
    created = T0 - timedelta(days=30)
    pod = b.pod(
        "ops", "monitor", started, claims=[("gpu", {"claim": "monitor-gpu"})], node_name=node, phase="Running",
        conditions=b.running_conditions(started, started + timedelta(minutes=1)),
        container_state=b.state_running(started + timedelta(minutes=1)),
    )  # fmt: skip
    claim = b.claim(
        "ops", "monitor-gpu", [b.request(admin_access=True)], started,
        allocated=[("gpu", node, "gpu-0")], allocated_at=started, reserved_for=[pod], admin_access=True,
    )  # fmt: skip
    return [b.namespace("ops", created=created, admin_access=True), pod, claim]


def test_a_slice_change_rederives_the_pods_reaching_its_pool_with_admin_access(tmp_path: Path) -> None:
    objects = small_cluster(pods=4) + _admin_pod("worker-1")
    _import(tmp_path, objects, 0)
    assert PodExplanation.objects.filter(valid_to__isnull=True, counted=True, name="monitor").exists()
    objects = _replace(objects, "ResourceSlice", "worker-1", _slice("worker-1", driver_version="580.200.1"))
    derived = _import(tmp_path, objects, 1)
    assert derived.pods_derived == 3 and _rejudged(derived) <= {"train-1", "train-3", "monitor"}
    objects = _replace(objects, "ResourceSlice", "worker-0", _slice("worker-0", driver_version="580.200.1"))
    derived = _import(tmp_path, objects, 2)
    assert derived.pods_derived == 2 and _rejudged(derived) <= {"train-0", "train-2"}
    assert assert_layer_matches_derivation("demo") > 0


def _rack_pod() -> Objects:
    """A running Pod whose claim's allocation selects its node by a label (``rack: r1``), not by name."""
    started = T0 - timedelta(hours=1)
    pod = b.pod(
        "team-a", "rack-job", started, claims=[("gpu", {"claim": "rack-job-gpu"})], node_name="worker-0",
        phase="Running", conditions=b.running_conditions(started, started + timedelta(minutes=1)),
        container_state=b.state_running(started + timedelta(minutes=1)),
    )
    claim = b.claim(
        "team-a", "rack-job-gpu", [b.request()], started, allocated=[("gpu", "worker-0", "gpu-3")],
        allocated_at=started, reserved_for=[pod], node_selector={"rack": "r1"},
    )  # fmt: skip
    return [pod, claim]


def _node(name: str, **labels: str) -> dict[str, Any]:
    return b.node(name, T0 - timedelta(days=30), labels=labels or None, heartbeat=T0)


NODE_HISTORY: list[tuple[str, Callable[[Objects], Objects]]] = [
    # Another node joins the rack: the label-selected allocation now matches two nodes.
    ("relabel", lambda o: _replace(o, "Node", "worker-1", _node("worker-1", rack="r1"))),
    # A node appears (an autoscaler's), in the rack too.
    ("added", lambda o: [*o, _node("worker-2", rack="r1")]),
    # It goes again.
    ("removed", lambda o: _replace(o, "Node", "worker-2", None)),
    # worker-1 leaves the rack: the allocation matches worker-0 alone again.
    ("left", lambda o: _replace(o, "Node", "worker-1", _node("worker-1"))),
]


def test_node_changes_rederive_only_the_pods_of_label_selected_allocations(tmp_path: Path) -> None:
    objects = _replace(small_cluster(pods=4), "Node", "worker-0", _node("worker-0", rack="r1")) + _rack_pod()
    _import(tmp_path, objects, 0)
    counted = set(PodExplanation.objects.filter(valid_to__isnull=True, counted=True).values_list("name", flat=True))
    assert {"train-0", "rack-job"} <= counted
    for minutes, (what, change) in enumerate(NODE_HISTORY, start=1):
        objects = change(objects)
        derived = _import(tmp_path, objects, minutes)
        assert not derived.full, what
        assert derived.pods_derived == 1, (what, _rejudged(derived))
        assert _rejudged(derived) <= {"rack-job"}, what
    assert assert_layer_matches_derivation("demo") > 0


def test_the_first_node_appearing_rederives_every_counted_pod(tmp_path: Path) -> None:
    """Without Nodes the nodes are read from the slices: the change from none to some is not bounded."""
    objects = small_cluster(pods=4)
    _import(tmp_path, [o for o in objects if o["kind"] != "Node"], 0)
    counted = PodExplanation.objects.filter(valid_to__isnull=True, counted=True).count()
    derived = _import(tmp_path, objects, 1)
    assert counted and derived.pods_derived == counted
    assert assert_layer_matches_derivation("demo") > 0
