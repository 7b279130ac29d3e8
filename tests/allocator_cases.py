"""Small clusters and a pending Pod's claims, generated for the allocator differential test.

``cases()`` draws one allocator-oracle case (reference/allocator-oracle/README.md: Nodes, ResourceSlices,
DeviceClasses, DeviceTaintRules, the cluster's allocated claims, the Pod's claims), covering what Claimline's
allocation verdicts claim to follow: exact counts and ``allocationMode: All``, ``firstAvailable``, constraints,
counter sets (with consumptions of a set or counter no slice advertises), consumable capacity with request
policies, ``adminAccess``, device taints, DeviceTaintRules and tolerations, CEL over attributes, capacities,
quantities and semvers, several claims, devices held by other claims or already by the Pod, node-local pools,
pools being updated or republished, and pools reachable from every node, a node selector or per device.
``claimline_fits(case)`` is Claimline's answer for it, per node.

Generated objects stay within API validation (a slice lists devices or counter sets, request policies only on
devices with ``allowMultipleAllocations``, a policy's default is one of its values), and what other claims hold
is what the allocator could have given them (an exclusive device once, counters and capacity not overcommitted),
as in a real cluster. Selectors only read attributes every device of their class has: a CEL runtime error fails
the scheduler's whole attempt at the first device it evaluates, which depends on its search order, not on what fits.

Each element (pool, device, claim, request…) reads its choices from bytes of its own that Hypothesis draws
(``Tape``): one draw instead of dozens keeps 2,000 cases quick, and smaller bytes pick earlier, simpler options,
so shrinking a failing case's bytes shrinks the case.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from hypothesis import strategies as st

from domain.allocator.matching import Simulation, Stage, find_class, missing_inventory
from domain.allocator.shared_simulations import simulate_pod
from domain.cluster.state import MemoryHistory, Object, uid_of
from domain.inventory.devices import Inventory, allocation, allocations_nodes

GPU = "gpu.example.com"
NIC = "nic.example.com"
PCIE = "resource.kubernetes.io/pcieRoot"
NAMESPACE = "ml"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

MODELS = ("A100", "H100", "L4")
VERSIONS = ("1.2.3", "1.10.0", "2.0.0", "2.1.0-rc.1")
MEMORIES = (24, 40, 48, 80)  # Gi
TAINT_KEYS = ("example.com/maintenance", "example.com/flaky")
EFFECTS = ("NoSchedule", "NoExecute", "None")

DRIVER_IS_GPU = f'device.driver == "{GPU}"'
CLASSES: dict[str, list[str]] = {
    "gpu": [DRIVER_IS_GPU],
    "gpu-big": [DRIVER_IS_GPU, f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0'],
    "gpu-shared": [DRIVER_IS_GPU, "device.allowMultipleAllocations"],
    "a100": [f'{DRIVER_IS_GPU} && device.attributes["{GPU}"].model == "A100"'],
    "nic": [f'device.driver == "{NIC}"'],
    "any": [],
}
GPU_CLASSES = ("gpu", "gpu-big", "gpu-shared", "a100")
CONSTRAINT_ATTRIBUTES = (
    f"{GPU}/model",
    f"{GPU}/index",
    f"{GPU}/uuid",
    f"{GPU}/driverVersion",
    f"{GPU}/nvlink",
    PCIE,
)
TOLERATIONS = (
    {"key": TAINT_KEYS[0], "operator": "Exists"},
    {"key": TAINT_KEYS[0], "operator": "Exists", "effect": "NoSchedule"},
    {"key": TAINT_KEYS[0], "operator": "Equal", "value": "true", "effect": "NoExecute"},
    {"operator": "Exists"},
    {"key": TAINT_KEYS[1], "value": "yes"},  # operator Equal by default
)

T = TypeVar("T")


class Tape:
    """Choices read from drawn bytes: a smaller byte picks an earlier option, and past the end every byte is 0."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def _byte(self) -> int:
        byte = self.data[self.at] if self.at < len(self.data) else 0
        self.at += 1
        return byte

    def int(self, low: int, high: int) -> int:
        return low + self._byte() * (high - low + 1) // 256

    def pick(self, options: Sequence[T]) -> T:
        return options[self.int(0, len(options) - 1)]

    def chance(self, one_in: int) -> bool:
        """True about once in ``one_in`` draws, and never for the smallest bytes."""
        return self._byte() >= 256 - 256 // one_in

    def some(self, options: Sequence[T], most: int) -> list[T]:
        """Up to ``most`` distinct options, in the options' order."""
        chosen = {self.int(0, len(options) - 1) for _ in range(self.int(0, most))}
        return [options[i] for i in sorted(chosen)]


def tape(draw: st.DrawFn, size: int = 16) -> Tape:
    return Tape(draw(st.binary(min_size=size, max_size=size)))


def gi(amount: int, spelling: int = 0) -> str:
    """A quantity of ``amount`` GiB, spelled in Gi or (``spelling`` 1) in Mi: both mean the same."""
    return f"{amount * 1024}Mi" if spelling == 1 else f"{amount}Gi"


def counter_values(counters: dict[str, int]) -> dict[str, dict[str, str]]:
    return {name: {"value": gi(amount) if name == "memory" else str(amount)} for name, amount in counters.items()}


def _object(kind: str, name: str, namespace: str | None, spec: dict[str, Any], uid: str) -> Object:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if namespace:
        meta["namespace"] = namespace
    obj: Object = {"apiVersion": "v1" if kind == "Node" else "resource.k8s.io/v1", "kind": kind, "metadata": meta}
    if spec:
        obj["spec"] = spec
    return obj


def _claim_uid(serial: int) -> str:
    return f"0a1b2c3d-0000-4000-8000-{serial:012d}"


# --- devices and pools ------------------------------------------------------------------------------


@dataclass
class Pool:
    driver: str
    name: str
    reach: dict[str, Any]  # the slices' nodeName / allNodes / nodeSelector / perDeviceNodeSelection
    node: str | None = None  # the node of a node-local pool
    devices: list[Device] = field(default_factory=list)
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)
    split: bool = False  # devices over two slices
    missing_slices: int = 0  # slices declared but not published: the pool is being updated
    generation: int = 1


@dataclass
class Device:
    """A generated device: its slice entry, and what allocating it takes (for the claims that hold it)."""

    pool: Pool
    entry: dict[str, Any]
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # counter set -> counter -> amount
    memory: int = 0  # Gi, of a shared device
    shares: tuple[int, ...] = ()  # what one share of a shared device may consume (Gi)

    @property
    def name(self) -> str:
        return str(self.entry["name"])

    @property
    def shared(self) -> bool:
        return bool(self.entry.get("allowMultipleAllocations"))

    @property
    def node(self) -> str | None:
        return self.pool.node or self.entry.get("nodeName")


def _memory(t: Tape) -> str:
    """The memory capacity's name, now and then with the driver's domain: a capacity request must spell it alike."""
    return f"{GPU}/memory" if t.chance(6) else "memory"


def _taints(t: Tape) -> list[dict[str, str]]:
    if not t.chance(6):
        return []
    return [{"key": t.pick(TAINT_KEYS), "value": t.pick(("true", "yes")), "effect": t.pick(EFFECTS)}]


def _gpu_attributes(t: Tape, pool: Pool, name: str, index: int, model: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "model": {"string": model},
        "cores": {"int": t.pick((1, 2, 4, 8))},
        "nvlink": {"bool": t.pick((False, True))},
        "driverVersion": {"version": t.pick(VERSIONS)},
        "index": {"int": index},
        "uuid": {"string": f"GPU-{pool.name}-{name}"},
    }
    if t.chance(4):  # spelled with the driver's domain: the same attribute
        attributes = {f"{GPU}/{k}" if k in ("model", "cores") else k: v for k, v in attributes.items()}
    if t.chance(2):
        attributes[PCIE] = {"string": f"pci-{t.int(0, 1)}"}
    return attributes


def _plain_gpu(t: Tape, pool: Pool, index: int) -> list[Device]:
    name = f"gpu-{index}"
    entry = {
        "name": name,
        "attributes": _gpu_attributes(t, pool, name, index, t.pick(MODELS)),
        "capacity": {_memory(t): {"value": gi(t.pick(MEMORIES), t.int(0, 3))}},
    }
    if taints := _taints(t):
        entry["taints"] = taints
    return [Device(pool, entry)]


def _partitioned_gpu(t: Tape, pool: Pool, index: int) -> list[Device]:
    """A whole GPU and its partitions, drawing on one counter set (now and then on one no slice advertises)."""
    memory, slices = 80, 4
    counter_set = f"gpu-{index}-counters"
    pool.counter_sets[counter_set] = {"memory": memory, "slices": slices}
    model = t.pick(MODELS)
    parts = [(f"gpu-{index}", memory, slices)]
    for part in range(t.int(1, 3)):
        size = t.pick((1, 2))
        parts.append((f"gpu-{index}-p{part}", memory * size // slices, size))
    devices = []
    for name, part_memory, part_slices in parts:
        uses = {counter_set: {"memory": part_memory, "slices": part_slices}}
        if t.chance(40):  # a counter set no slice advertises: the allocator refuses the whole pool
            uses = {"gpu-ghost-counters": {"memory": part_memory}}
        elif t.chance(40):  # a counter its set does not have: likewise
            uses[counter_set]["power"] = 100
        entry = {
            "name": name,
            "attributes": _gpu_attributes(t, pool, name, index, model),
            "capacity": {"memory": {"value": gi(part_memory)}},
            "consumesCounters": [{"counterSet": cs, "counters": counter_values(c)} for cs, c in uses.items()],
        }
        if taints := _taints(t):
            entry["taints"] = taints
        devices.append(Device(pool, entry, counters=uses))
    return devices


def _policy(t: Tape, memory: int) -> tuple[dict[str, Any] | None, tuple[int, ...]]:
    """A valid requestPolicy for ``memory`` Gi, and the amounts one share may consume under it."""
    kind = t.pick(("none", "values", "range", "range-max"))
    if kind == "none":
        return None, tuple(sorted({4, 8, memory // 2, memory}))
    if kind == "values":
        values = t.some((4, 8, 16, memory // 2, memory), 3) or [memory]
        values = sorted(set(values))
        return {"default": gi(t.pick(values)), "validValues": [gi(v) for v in values]}, tuple(values)
    low, step = t.pick(((4, 4), (8, 8), (2, 6)))
    top = memory if kind == "range" else min(memory, low + step * t.int(1, 3))
    steps = tuple(range(low, top + 1, step))
    bounds = {"min": gi(low), "step": gi(step)} | ({"max": gi(top)} if kind == "range-max" else {})
    return {"default": gi(t.pick(steps)), "validRange": bounds}, steps


def _shared_gpu(t: Tape, pool: Pool, index: int) -> list[Device]:
    name = f"vgpu-{index}"
    memory = t.pick((16, 48))
    policy, shares = _policy(t, memory)
    capacity: dict[str, Any] = {"value": gi(memory)} | ({"requestPolicy": policy} if policy else {})
    entry: dict[str, Any] = {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": _gpu_attributes(t, pool, name, index, t.pick(MODELS)),
        "capacity": {_memory(t): capacity},
    }
    device = Device(pool, entry, memory=memory, shares=shares)
    if t.chance(5):  # a shared device drawing on a counter set too: once, however many share it
        counter_set = f"vgpu-{index}-counters"
        pool.counter_sets[counter_set] = {"slices": 2}
        entry["consumesCounters"] = [{"counterSet": counter_set, "counters": counter_values({"slices": 1})}]
        device.counters = {counter_set: {"slices": 1}}
    if taints := _taints(t):
        entry["taints"] = taints
    return [device]


def _nic(t: Tape, pool: Pool, index: int) -> list[Device]:
    attributes: dict[str, Any] = {"speed": {"int": t.pick((100, 200, 400))}}
    if t.chance(2):
        attributes[PCIE] = {"string": f"pci-{t.int(0, 1)}"}
    return [Device(pool, {"name": f"nic-{index}", "attributes": attributes})]


_GPU_KINDS: tuple[Callable[[Tape, Pool, int], list[Device]], ...] = (
    _plain_gpu,
    _plain_gpu,
    _partitioned_gpu,
    _shared_gpu,
)


def _gpu_pool(draw: st.DrawFn, pool: Pool, most: int) -> Pool:
    t = tape(draw, 4)
    for index in range(min(most, t.pick((1, 1, 2, 2, 3, 0)))):
        pool.devices += t.pick(_GPU_KINDS)(tape(draw, 40), pool, index)
    # Now and then over two slices, one of them not published yet (being updated), or republished.
    pool.split = len(pool.devices) > 1 and t.chance(2)
    pool.missing_slices = int(t.chance(20))
    pool.generation = 2 if t.chance(20) else 1
    return pool


def _pools(draw: st.DrawFn, nodes: list[str]) -> list[Pool]:
    pools = []
    for node in nodes:
        pools.append(_gpu_pool(draw, Pool(GPU, node, {"nodeName": node}, node), 3))
        t = tape(draw, 6)
        if t.chance(2):
            nic = Pool(NIC, node, {"nodeName": node}, node)
            for index in range(t.int(1, 2)):
                nic.devices += _nic(t, nic, index)
            pools.append(nic)
    t = tape(draw, 12)
    reach = t.pick(("none", "none", "all", "zone", "per-device"))
    if reach == "all":
        pools.append(_gpu_pool(draw, Pool(GPU, "fabric", {"allNodes": True}), 2))
    elif reach == "zone":
        zone = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
        pools.append(_gpu_pool(draw, Pool(GPU, "fabric", {"nodeSelector": zone}), 2))
    elif reach == "per-device":
        pool = Pool(GPU, "fabric", {"perDeviceNodeSelection": True})
        for index in range(t.int(1, 3)):
            [device] = _plain_gpu(tape(draw, 24), pool, index)
            where = t.pick([*nodes, "*"])
            device.entry |= {"allNodes": True} if where == "*" else {"nodeName": where}
            pool.devices.append(device)
        pools.append(pool)
    return pools


def _slices(pool: Pool) -> list[Object]:
    device_lists = [pool.devices]
    if pool.split:
        half = len(pool.devices) // 2
        device_lists = [pool.devices[:half], pool.devices[half:]]
    contents: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (pool.reach, {"devices": [d.entry for d in devices]}) for devices in device_lists
    ]
    if pool.counter_sets:
        # API validation keeps counter sets and devices in separate slices of the pool.
        reach = {"allNodes": True} if "perDeviceNodeSelection" in pool.reach else pool.reach
        sets = [{"name": name, "counters": counter_values(c)} for name, c in pool.counter_sets.items()]
        contents.append((reach, {"sharedCounters": sets}))
    count = len(contents) + pool.missing_slices
    short = pool.driver.split(".")[0]
    out = []
    for index, (reach, content) in enumerate(contents):
        spec = (
            {
                "driver": pool.driver,
                "pool": {"name": pool.name, "generation": pool.generation, "resourceSliceCount": count},
            }
            | reach
            | content
        )
        name = f"{pool.name}-{short}-{index}"
        out.append(_object("ResourceSlice", name, None, spec, f"slice-{name}"))
    if pool.generation > 1:  # what the pool advertised before: the allocator reads only the newest generation
        spec = {"driver": pool.driver, "pool": {"name": pool.name, "generation": 1, "resourceSliceCount": 1}}
        old = {"name": "gpu-old", "attributes": {"model": {"string": "A100"}}}
        name = f"{pool.name}-{short}-old"
        out.append(_object("ResourceSlice", name, None, spec | pool.reach | {"devices": [old]}, f"slice-{name}"))
    return out


# --- the Pod's claims -----------------------------------------------------------------------------


def _gpu_selector(t: Tape) -> str:
    attrs = f'device.attributes["{GPU}"]'
    memory = f'device.capacity["{GPU}"].memory'
    domain, name = PCIE.split("/")
    choices: tuple[Callable[[], str], ...] = (
        lambda: f'{attrs}.model == "{t.pick(MODELS)}"',
        lambda: f'{attrs}["model"] != "{t.pick(MODELS)}"',
        lambda: f'{attrs}.model in ["A100", "H100"]',
        lambda: f"{attrs}.cores >= {t.pick((2, 4))}",
        lambda: f"{attrs}.nvlink",
        lambda: f"!{attrs}.nvlink",
        lambda: f'{attrs}.driverVersion.compareTo(semver("{t.pick(VERSIONS)}")) >= 0',
        lambda: f'{attrs}.driverVersion.isLessThan(semver("2.0.0"))',
        lambda: f'semver("1.5.0").isLessThan({attrs}.driverVersion)',
        lambda: f'{memory}.compareTo(quantity("{gi(t.pick((40, 48)), t.int(0, 1))}")) >= 0',
        lambda: f'{memory}.isLessThan(quantity("{t.pick(("48Gi", "81920Mi"))}"))',
        lambda: f'"{name}" in device.attributes["{domain}"]',
        lambda: f'{memory}.isGreaterThan(quantity("10Gi")) && {attrs}.index <= 1',
    )
    return t.pick(choices)()


def _selectors(t: Tape, class_name: str) -> list[str]:
    if class_name in GPU_CLASSES:
        return [_gpu_selector(t) for _ in range(t.pick((0, 0, 0, 1, 1, 2)))]
    if class_name == "nic":
        return [f'device.attributes["{NIC}"].speed >= 200'] if t.chance(2) else []
    if class_name == "any":  # devices of both drivers: read nothing only one of them has
        return [t.pick((DRIVER_IS_GPU, f'device.driver == "{NIC}"'))] if t.chance(2) else []
    return []


def _ask(t: Tape, subrequest: bool) -> dict[str, Any]:
    class_name = "missing" if t.chance(150) else t.pick((*GPU_CLASSES, "gpu", "gpu", "nic", "any"))
    ask: dict[str, Any] = {"deviceClassName": class_name}
    if t.chance(6):
        ask["allocationMode"] = "All"
    else:
        count = t.pick((1, 1, 1, 2, 3))
        if count > 1 or t.chance(2):  # else left to the defaults: ExactCount, count 1
            ask |= {"allocationMode": "ExactCount", "count": count}
    if selectors := _selectors(t, class_name):
        ask["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if t.chance(4):
        ask["tolerations"] = t.some(TOLERATIONS, 2) or [TOLERATIONS[0]]
    if class_name in ("gpu-shared", "gpu", "any") and t.chance(3):
        ask["capacity"] = {"requests": {_memory(t): gi(t.pick((1, 4, 8, 8, 10, 16, 24, 40, 100)))}}
    if not subrequest and t.chance(10):
        ask["adminAccess"] = True
    return ask


def _claim_spec(draw: st.DrawFn) -> dict[str, Any]:
    t = tape(draw, 12)
    requests: list[dict[str, Any]] = []
    names: list[str] = []
    for index in range(t.pick((1, 1, 1, 2, 2, 3))):
        name = f"r{index}"
        if t.chance(4):
            subs = [{"name": f"s{k}"} | _ask(tape(draw, 24), True) for k in range(t.int(2, 3))]
            requests.append({"name": name, "firstAvailable": subs})
            names += [name, *(f"{name}/{s['name']}" for s in subs)]
        else:
            requests.append({"name": name, "exactly": _ask(tape(draw, 24), False)})
            names.append(name)
    devices: dict[str, Any] = {"requests": requests}
    constraints = []
    for _ in range(t.int(1, 2) if t.chance(3) else 0):
        constraint: dict[str, Any] = {t.pick(("matchAttribute", "distinctAttribute")): t.pick(CONSTRAINT_ATTRIBUTES)}
        if t.chance(2):
            constraint["requests"] = t.some(names, 2) or [names[0]]
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


# --- what other claims hold -----------------------------------------------------------------------


class _Holdings:
    """Allocations the allocator could have made, each checked against what is held already as it is added."""

    def __init__(self) -> None:
        self.exclusive: set[tuple[str, str, str]] = set()
        self.counters: dict[tuple[str, str, str], dict[str, int]] = {}
        self.capacity: dict[tuple[str, str, str], int] = {}
        self.uids = itertools.count(100)
        self.share_ids = itertools.count(1)

    def take(self, device: Device, share: int | None) -> bool:
        pool = device.pool
        key = (pool.driver, pool.name, device.name)
        if key in self.exclusive or pool.missing_slices:
            return False
        counted = not (device.shared and key in self.capacity)  # a shared device takes its counters once
        if counted:
            for counter_set, amounts in device.counters.items():
                total = pool.counter_sets.get(counter_set)
                if total is None or any(name not in total for name in amounts):
                    return False  # the pool is invalid: nothing of it is allocated
                used = self.counters.get((pool.driver, pool.name, counter_set), {})
                if any(used.get(name, 0) + amount > total[name] for name, amount in amounts.items()):
                    return False
        if device.shared:
            assert share is not None
            if self.capacity.get(key, 0) + share > device.memory:
                return False
            self.capacity[key] = self.capacity.get(key, 0) + share
        else:
            self.exclusive.add(key)
        if counted:
            for counter_set, amounts in device.counters.items():
                used = self.counters.setdefault((pool.driver, pool.name, counter_set), {})
                for name, amount in amounts.items():
                    used[name] = used.get(name, 0) + amount
        return True

    def result(self, device: Device, share: int | None, admin: bool) -> dict[str, Any]:
        pool = device.pool
        result: dict[str, Any] = {"request": "r0", "driver": pool.driver, "pool": pool.name, "device": device.name}
        if admin:
            result["adminAccess"] = True
        elif device.shared:
            # What the allocator records for a share: an ID of its own and what it consumed of every capacity.
            result["shareID"] = f"00000000-0000-4000-8000-{next(self.share_ids):012d}"
            result["consumedCapacity"] = {name: gi(share or 0) for name in device.entry["capacity"]}
        return result


def _node_selector(devices: list[Device]) -> dict[str, Any] | None:
    """The allocation's nodeSelector as the allocator writes it (createNodeSelector): the node, a slice's terms, none."""
    for device in devices:
        if device.node:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [device.node]}]}
            return {"nodeSelectorTerms": [term]}
    terms = [term for d in devices for term in d.pool.reach.get("nodeSelector", {}).get("nodeSelectorTerms", [])]
    return {"nodeSelectorTerms": terms[:1]} if terms else None  # one pool has a selector here: its one term


def _holders(
    draw: st.DrawFn, pools: list[Pool], holdings: _Holdings, prefix: str, most: int, least: int = 0
) -> list[Object]:
    """Up to ``most`` claims named ``prefix-i``, each allocated one or two devices nobody holds yet."""
    devices = [d for p in pools for d in p.devices]
    t = tape(draw, 24)
    claims: list[Object] = []
    for index in range(t.int(least, most) if devices else 0):
        results, held = [], []
        for device in t.some(devices, 2):
            admin = prefix == "other" and t.chance(6)  # observes the device next to its user, holds nothing
            share = t.pick(device.shares) if device.shared else None
            if admin or holdings.take(device, share):
                results.append(holdings.result(device, share, admin))
                held.append(device)
        if not results:
            continue
        request = {
            "name": "r0",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": len(results)},
        }
        claim = _object(
            "ResourceClaim",
            f"{prefix}-{index}",
            NAMESPACE,
            {"devices": {"requests": [request]}},
            _claim_uid(next(holdings.uids)),
        )
        allocated: dict[str, Any] = {"devices": {"results": results}}
        if (selector := _node_selector(held)) is not None:
            allocated["nodeSelector"] = selector
        claim["status"] = {"allocation": allocated}
        claims.append(claim)
    return claims


# --- the case -------------------------------------------------------------------------------------


def _taint_rules(draw: st.DrawFn, pools: list[Pool]) -> list[Object]:
    t = tape(draw, 16)
    rules = []
    for index in range(t.int(1, 2) if t.chance(3) else 0):
        taint = {"key": t.pick(TAINT_KEYS), "value": "true", "effect": t.pick(EFFECTS)}
        spec: dict[str, Any] = {"taint": taint}
        shape = t.pick(("pool", "device", "driver", "empty", "none"))
        pool = t.pick(pools)
        if shape == "pool":
            spec["deviceSelector"] = {"pool": pool.name} | ({"driver": pool.driver} if t.chance(2) else {})
        elif shape == "device" and pool.devices:
            spec["deviceSelector"] = {"driver": pool.driver, "pool": pool.name, "device": t.pick(pool.devices).name}
        elif shape == "driver":
            spec["deviceSelector"] = {"driver": t.pick((GPU, NIC))}
        elif shape == "empty":
            spec["deviceSelector"] = {}  # matches every device
        # else no selector at all, which matches no device
        rules.append(_object("DeviceTaintRule", f"rule-{index}", None, spec, f"rule-{index}"))
    return rules


_SERIAL = itertools.count()


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    """One allocator-oracle case: a cluster of 1 to 3 nodes and a pending Pod's 1 to 3 claims."""
    t = tape(draw, 8)
    nodes = [f"n{i}" for i in range(t.int(1, 3))]
    zones = {n: t.pick(("a", "b")) for n in nodes}
    pools = _pools(draw, nodes)
    holdings = _Holdings()
    others = _holders(draw, pools, holdings, "other", 3)
    pod_allocated = _holders(draw, pools, holdings, "pod-allocated", 1, least=1) if t.chance(8) else []
    claims = [
        _object("ResourceClaim", f"claim-{i}", NAMESPACE, _claim_spec(draw), _claim_uid(i + 1))
        for i in range(t.pick((1, 1, 1, 2, 2, 3)))
    ]
    return {
        "name": f"case-{next(_SERIAL)}",
        "nodes": [
            _object("Node", n, None, {}, f"node-{n}")
            | {"metadata": {"name": n, "uid": f"node-{n}", "labels": {"zone": zones[n]}}}
            for n in nodes
        ],
        "resourceSlices": [s for p in pools for s in _slices(p)],
        "deviceClasses": [
            _object(
                "DeviceClass", name, None, {"selectors": [{"cel": {"expression": e}} for e in exprs]}, f"class-{name}"
            )
            for name, exprs in CLASSES.items()
        ],
        "deviceTaintRules": _taint_rules(draw, pools),
        "allocatedClaims": others,
        "claims": pod_allocated + claims,
    }


# --- Claimline's answer ---------------------------------------------------------------------------


def claimline_simulation(case: dict[str, Any]) -> Simulation | None:
    """Claimline's allocation simulation of the case's Pod, as its allocation verdict runs it; None where the verdict
    fails before simulating.

    Follows domain/boundaries/lifecycle.py's ``_judge_unallocated``: a claim naming a DeviceClass that does not
    exist, or whose drivers no slice advertises, fails on every node; otherwise ``simulate_pod`` over the
    pending claims, with the Pod's allocated claims as siblings pinning it to their nodes (``_pinned_nodes``).
    """
    objects = [
        *case["nodes"],
        *case["resourceSlices"],
        *case["deviceClasses"],
        *case["deviceTaintRules"],
        *case["allocatedClaims"],
        *case["claims"],
    ]
    state = MemoryHistory([(T0, objects)]).state
    inventory = Inventory.of(state)
    pending = [c for c in case["claims"] if allocation(c) is None]
    allocated = [c for c in case["claims"] if allocation(c) is not None]
    for claim in pending:
        asks = [a for r in claim["spec"]["devices"]["requests"] for a in r.get("firstAvailable") or [r["exactly"]]]
        if any(find_class(state, a["deviceClassName"]) is None for a in asks):
            return None
        if missing_inventory(inventory, claim) is not None:
            return None
    pinned = allocations_nodes(allocated, inventory.nodes)
    return simulate_pod(
        inventory,
        pending,
        nodes=sorted(pinned) if pinned is not None else None,
        sibling_claims=[uid_of(c) for c in allocated],
    )


def claimline_fits(case: dict[str, Any]) -> dict[str, bool]:
    """Whether the Pod's pending claims can be allocated on each node, as Claimline's allocation verdict decides."""
    sim = claimline_simulation(case)
    fits = {fit.node: fit.stage == Stage.FITS for fit in sim.fits} if sim is not None else {}
    return {n["metadata"]["name"]: fits.get(n["metadata"]["name"], False) for n in case["nodes"]}
