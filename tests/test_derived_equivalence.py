"""Random histories through both paths: the derived layer serves what explain derives on read.

A small cluster (two nodes of two GPUs, one class) lives through a generated list of
steps: Pods created (with a template claim or a named claim that may not exist yet),
claims allocated to free devices, Pods running, failing preparation, finishing, deleted
and recreated under the same name, claims freed or deleted, devices tainted, slices
replaced, nodes going NotReady. Each step is one import-snapshot ten minutes after the
last; at every snapshot every Pod incarnation's stored document must equal explain's,
and /metrics must be equal too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from demo import builders as b
from derived.models import DerivedSnapshot
from tests.derived_checks import assert_layer_matches_derivation, assert_review_matches_derivation

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
NS = "team-a"
NODES = ("node-a", "node-b")
GPUS = 2
NAMES = ("train-0", "train-1", "serve-0")
OPS = (
    "create", "create", "create", "allocate", "allocate", "allocate", "run", "run", "fail-prepare", "finish",
    "delete-pod", "recreate", "free-claim", "delete-claim", "create-claim", "taint", "replace-slice", "node-down",
)


@dataclass
class PodSlot:
    name: str
    incarnation: int
    created: datetime
    template: bool  # else a named claim, "<name>-gpu"
    count: int
    devices: list[tuple[str, str]] = field(default_factory=list)
    allocated_at: datetime | None = None
    phase: str = "Pending"
    started: datetime | None = None
    prep_failed_at: datetime | None = None
    finished: datetime | None = None


@dataclass
class World:
    at: datetime = T0
    pods: dict[str, PodSlot] = field(default_factory=dict)
    named_claims: set[str] = field(default_factory=set)  # direct claims that exist
    taints: set[tuple[str, str]] = field(default_factory=set)
    generation: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NODES, 1))
    down: set[str] = field(default_factory=set)

    def held(self) -> set[tuple[str, str]]:
        return {d for p in self.pods.values() for d in p.devices}

    def pick(self, n: int) -> PodSlot | None:
        slots = sorted(self.pods)
        return self.pods[slots[n % len(slots)]] if slots else None

    def apply(self, op: str, n: int) -> None:
        self.at += timedelta(minutes=10)
        slot = self.pick(n)
        if op == "create":
            name = NAMES[n % len(NAMES)]
            if name not in self.pods:
                self.pods[name] = PodSlot(name, 0, self.at, template=n % 2 == 0, count=1 if n % 3 == 0 else 2)
        elif op == "recreate" and slot is not None:
            self.pods[slot.name] = PodSlot(slot.name, slot.incarnation + 1, self.at, slot.template, slot.count)
        elif op == "create-claim" and slot is not None and not slot.template:
            self.named_claims.add(slot.name)
        elif op == "allocate" and slot is not None and not slot.devices and slot.phase == "Pending":
            if not slot.template and slot.name not in self.named_claims:
                return
            for node in NODES:
                free = [
                    (node, f"gpu-{i}") for i in range(GPUS)
                    if (node, f"gpu-{i}") not in self.held() and (node, f"gpu-{i}") not in self.taints
                ]
                if node not in self.down and len(free) >= slot.count:
                    slot.devices, slot.allocated_at = free[: slot.count], self.at
                    return
        elif op == "run" and slot is not None and slot.devices and slot.phase == "Pending":
            slot.phase, slot.started, slot.prep_failed_at = "Running", self.at, None
        elif op == "fail-prepare" and slot is not None and slot.devices and slot.phase == "Pending":
            slot.prep_failed_at = slot.prep_failed_at or self.at
        elif op == "finish" and slot is not None and slot.phase == "Running":
            slot.phase, slot.finished = "Succeeded", self.at
        elif op == "delete-pod" and slot is not None:
            del self.pods[slot.name]
        elif op == "free-claim" and slot is not None and slot.phase != "Running":
            slot.devices, slot.allocated_at = [], None
        elif op == "delete-claim" and slot is not None and not slot.template and slot.phase != "Running":
            self.named_claims.discard(slot.name)
            slot.devices, slot.allocated_at = [], None
        elif op == "taint":
            device = (NODES[n % 2], f"gpu-{(n // 2) % GPUS}")
            self.taints ^= {device}
        elif op == "replace-slice":
            self.generation[NODES[n % 2]] += 1
        elif op == "node-down":
            self.down ^= {NODES[n % 2]}

    def objects(self) -> list[dict[str, Any]]:
        out = [b.namespace(NS), b.device_class()]
        template = b.claim_template(NS, "gpu", [b.request()])
        template2 = b.claim_template(NS, "gpu-2", [b.request(count=2)])
        out += [template, template2]
        for node in NODES:
            out.append(b.node(node, T0, ready=node not in self.down))
            devices = [
                b.gpu_device(f"gpu-{i}", node=node, taints=[b.taint("maintenance")] if (node, f"gpu-{i}") in self.taints
                             else None)
                for i in range(GPUS)
            ]
            out.append(b.resource_slice(node, devices, generation=self.generation[node]))
        for slot in self.pods.values():
            out += self._pod_objects(slot, template if slot.count == 1 else template2)
        return out

    def _pod_objects(self, slot: PodSlot, template: dict[str, Any]) -> list[dict[str, Any]]:
        claim_name = f"{slot.name}-gpu"
        source = {"template": template["metadata"]["name"]} if slot.template else {"claim": claim_name}
        node = slot.devices[0][0] if slot.devices else None
        conditions: list[dict[str, Any]] = []
        state = None
        if node is None:
            conditions = [b.unschedulable(slot.created, "0/2 nodes are available: cannot allocate all claims.")]
        elif slot.phase == "Running":
            assert slot.started is not None and slot.allocated_at is not None
            conditions, state = b.running_conditions(slot.allocated_at, slot.started), b.state_running(slot.started)
        elif slot.phase == "Succeeded":
            assert slot.started is not None and slot.finished is not None and slot.allocated_at is not None
            conditions = b.completed_conditions(slot.allocated_at, slot.finished)
            state = b.state_terminated(slot.started, slot.finished)
        else:
            assert slot.allocated_at is not None
            conditions = b.stuck_conditions(slot.allocated_at, sandbox_ready=False)
        pod = b.pod(
            NS, slot.name, slot.created, claims=[("gpu", source)], node_name=node, phase=slot.phase,
            conditions=conditions, container_state=state, incarnation=slot.incarnation,
        )
        allocation: dict[str, Any] = {}
        if slot.devices:
            allocation = {
                "allocated": [("gpu", pool, device) for pool, device in slot.devices],
                "allocated_at": slot.allocated_at,
                "reserved_for": [b.pod_ref(pod)] if slot.phase != "Succeeded" else None,
            }
        out = [pod]
        if slot.template:
            out.append(b.template_claim(template, pod, **allocation))
        elif slot.name in self.named_claims:
            out.append(b.claim(NS, claim_name, [b.request(count=slot.count)], T0, **allocation))
        if slot.prep_failed_at is not None:
            out.append(b.event(pod, "FailedPrepareDynamicResources", "prepare: driver timed out", slot.prep_failed_at))
        return out


_clusters = itertools.count()
STEPS = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5)), min_size=4, max_size=10)


# Two histories always run: a pending Pod whose verdict changes only because another claim
# was freed (devices-in-use, then free), and a running Pod whose device is tainted and node lost.
@example(
    steps=[("create", 2), ("create", 1), ("create-claim", 2), ("allocate", 0), ("allocate", 2), ("free-claim", 0)]
)
@example(steps=[("allocate", 0), ("run", 0), ("taint", 0), ("node-down", 0), ("replace-slice", 0)])
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_random_histories_read_the_same_from_the_layer(steps: list[tuple[str, int]], tmp_path: Path) -> None:
    cluster = f"random-{next(_clusters)}"
    world = World()
    for i, (op, n) in enumerate([("create", 0), *steps]):
        world.apply(op, n)
        dump = tmp_path / f"{cluster}-{i}.json"
        dump.write_bytes(b.dump_json(world.objects()))
        call_command("import-snapshot", str(dump), "--at", world.at.isoformat(), "--cluster", cluster)
    assert DerivedSnapshot.objects.filter(cluster__name=cluster).count() == len(steps) + 1
    assert assert_layer_matches_derivation(cluster) > 0
    assert assert_review_matches_derivation(cluster)["reviews"] > 0
