"""match-devices after a slice change answers from what the last snapshot's answer learnt.

A process keeps each cluster's devices read last (``derived.match_stock``) with their selector cache:
each device's verdict, its entry in ``matched``, ``rejected`` or ``errors``, and the values the
why-not sentences group it by are carried to the next snapshot for the devices that did not change
(``SelectorCache.memo``), so only the changed devices are projected and judged again. These tests
change slices at random over several snapshots and compare each answer with one computed afresh
over the state's ``Inventory``.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

import domain.allocator.device_checks
from collector.history_reader import StoredHistory
from collector.models import Cluster
from demo import builders as b
from derived import match_stock
from derived.match_stock import stored_stock
from domain.allocator.matching import match_devices
from tests.clusters import T0
from tests.derived_checks import MATCH_EXPRESSIONS
from tests.snapshot_cli import import_objects

pytestmark = pytest.mark.django_db

NODES = 4
CLASS_SELECTORS = ["device.attributes['gpu.nvidia.com'].type == 'gpu'"]
H100 = ["device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"]
H100_CLASSES = ("h100-a.example.com", "h100-b.example.com")
FABRIC = "example.com/fabric"
EXPRESSIONS = (
    *MATCH_EXPRESSIONS,
    "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
    # Reads an attribute some devices spell as a bool and others as an int: grouped apart.
    "device.attributes['gpu.nvidia.com'].mig == true",
    # Fails to evaluate on the devices without the capacity: the errors list.
    "device.capacity['gpu.nvidia.com'].slots.compareTo(quantity('2')) >= 0",
)
PROBE = "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"  # asked last in each snapshot
NAMESPACES = ("team-a", "team-b")
MODELS = (("NVIDIA A100-SXM4-40GB", "40Gi"), ("NVIDIA H100 80GB HBM3", "80Gi"), ("NVIDIA H100 80GB HBM3", "81920Mi"))


def _device(rng: random.Random, node: str, index: int) -> dict[str, Any]:
    product, memory = rng.choice(MODELS)
    extra = {"mig": rng.choice([True, 1, False])} if rng.random() < 0.5 else None
    slots = {"slots": str(rng.randint(1, 3))} if rng.random() < 0.5 else None
    return b.gpu_device(
        f"gpu-{index}", node=node, product=product, memory=memory, extra_attributes=extra, extra_capacity=slots
    )


def _cluster(
    slices: dict[str, list[dict[str, Any]]], fabric_node: str, claims: dict[tuple[str, str], tuple[str, str]]
) -> list[dict[str, Any]]:
    created = T0 - timedelta(days=30)
    objects = [b.device_class(selectors=CLASS_SELECTORS, created=created)]
    # Two classes alike but for their names, which their refusals say.
    objects += [b.device_class(name, selectors=H100, created=created) for name in H100_CLASSES]
    for node, devices in slices.items():
        labels = {FABRIC: "yes"} if node == fabric_node else {}
        objects.append(b.node(node, created=created, labels=labels, heartbeat=T0))
        objects.append(b.resource_slice(node, devices, created=created))
    # A device without a node of its own, reachable from the Nodes with a label that moves between
    # snapshots while its slice stays: its entry names the one node it is reachable from each time.
    fabric = b.gpu_device("shared-0", node="any")
    objects.append(b.resource_slice(None, [fabric], pool="fabric", node_selector={FABRIC: "yes"}, created=created))
    for (namespace, name), (node, device) in claims.items():
        objects.append(
            b.claim(
                namespace, name, [b.request()], created, allocated=[("gpu", node, device)], uid=f"{namespace}-{name}"
            )
        )
    return objects


def _hold(rng: random.Random, slices: dict[str, list[dict[str, Any]]], claims: dict[Any, tuple[str, str]]) -> None:
    """Allocate a claim or two (now and then on a device another claim holds: the first by namespace and
    name is its holder), and release or delete one."""
    for _ in range(rng.randint(1, 2)):
        held = list(claims.values())
        if held and rng.random() < 0.3:
            node, device = rng.choice(held)
        else:
            node = rng.choice(sorted(n for n, devices in slices.items() if devices))
            device = rng.choice(slices[node])["name"]
        claims[(rng.choice(NAMESPACES), f"claim-{rng.randrange(1000)}")] = (node, device)
    if claims and rng.random() < 0.7:
        del claims[rng.choice(sorted(claims))]


def _change(rng: random.Random, slices: dict[str, list[dict[str, Any]]]) -> None:
    """Rewrite one device, drop one or add one, on a node or two."""
    for node in rng.sample(sorted(slices), rng.randint(1, 2)):
        devices = slices[node]
        what = rng.choice(["rewrite", "drop", "add"]) if devices else "add"
        if what == "rewrite":
            i = rng.randrange(len(devices))
            devices[i] = _device(rng, node, int(devices[i]["name"].removeprefix("gpu-")))
        elif what == "drop":
            devices.pop(rng.randrange(len(devices)))
        else:
            taken = {int(d["name"].removeprefix("gpu-")) for d in devices}
            devices.append(_device(rng, node, min(set(range(len(taken) + 1)) - taken)))


def _json(doc: Any) -> Any:
    return orjson.loads(orjson.dumps(doc))


@pytest.mark.parametrize("seed", range(3))
def test_answers_carried_over_slice_changes_equal_fresh_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    slices = {f"worker-{n}": [_device(rng, f"worker-{n}", i) for i in range(rng.randint(3, 6))] for n in range(NODES)}
    projected: list[int] = []
    projection_keys = domain.allocator.device_checks.projection_keys

    def counting(outlines: Any, refs: Any) -> Any:
        projected.append(len(outlines))
        return projection_keys(outlines, refs)

    monkeypatch.setattr(domain.allocator.device_checks, "projection_keys", counting)
    match_stock.forget()
    at = T0
    previous: set[int] = set()
    seen: set[str] = set()
    claims: dict[tuple[str, str], tuple[str, str]] = {}
    for step in range(6):
        if step:
            _change(rng, slices)
        # Claims allocated, released and deleted: the holders carried from the last answer are chosen
        # again only for the devices whose held spans changed.
        _hold(rng, slices, claims)
        at += timedelta(minutes=5)
        import_objects(tmp_path, _cluster(slices, f"worker-{rng.randrange(NODES)}", claims), at)
        cluster = Cluster.objects.get()
        history = StoredHistory(cluster, at)
        stock = stored_stock(history)
        assert stock is not None
        # Unchanged rows keep their device objects: the others are new or changed.
        changed = [d for d in stock.devices if id(d) not in previous]
        if step:
            # Not vacuous: the selector asked last before the change (its memos are the most recent
            # the cache keeps) projects only the changed devices.
            projected.clear()
            probed = match_devices(history.state, PROBE, None, stock)
            assert sum(projected) == len(changed) < len(stock.devices), (seed, step)
            # And its answer, carried (each pool's refusals kept unless the pool changed), is right.
            assert _json(probed) == _json(match_devices(StoredHistory(cluster, at).state, PROBE)), (seed, step)
        # Each expression within each class in turn: the two classes alike but for their names are
        # asked one after the other, while the first one's memos are kept.
        for expression in EXPRESSIONS:
            for class_name in (None, b.GPU_DRIVER, *H100_CLASSES):
                carried = match_devices(history.state, expression, class_name, stock)
                fresh = match_devices(StoredHistory(cluster, at).state, expression, class_name)
                assert _json(carried) == _json(fresh), (seed, step, class_name, expression)
                # Asked again of the same devices: the same answer, nothing projected again.
                projected.clear()
                assert _json(match_devices(history.state, expression, class_name, stock)) == _json(fresh)
                assert not projected
                seen |= {key for key in ("matched", "rejected", "errors") if fresh[key]}
                seen |= {"grouped"} if any(" and " in why for why in fresh["why_not"]) else set()
                seen |= {m["node"] for m in fresh["matched"] if m["device"] == "shared-0"}
                seen |= {"held"} if any("unavailable" in m for m in fresh["matched"]) else set()
        previous = {id(d) for d in stock.devices}
        match_devices(history.state, PROBE, None, stock)  # asked again: its memos the most recent
    # Every list the carried entries go to was compared non-empty, a why-not sentence with groups and a
    # matched device someone holds.
    # The device reachable from one labelled node was placed on more than one over the snapshots.
    kinds = {"matched", "rejected", "errors", "grouped", "held"}
    assert kinds <= seen and len(seen - kinds) > 1
