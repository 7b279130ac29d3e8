"""CPU time of the allocation simulator: one simulate() per pending claim over one Inventory, as reports do.

    .venv/bin/python bench/simulate_bench.py --nodes 300 --claims 99 --repeat 3
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python bench/simulate_bench.py ...   # the simulator of another checkout

Two clusters of N nodes x 8 GPUs: ``plain`` (whole GPUs, half of each node's held; claims for 1..8 GPUs with
a memory selector) and ``partitioned`` (each H100 advertised whole and as two 3g.40gb partitions on one
counter set, one partition of every other GPU held; claims for whole GPUs, for partitions, and for two GPUs
with a matchAttribute constraint). CPU time (process_time), best of the repeats: the machine is shared.

Then (or alone, with ``--only match-devices``) it times ``match_devices`` over the plain cluster
(5,000 nodes are 40,000 GPUs): the first expression over a state (every device's values read, one
device per group converted for CEL), another expression over the same state, and the first again over
a new state of the same devices (the next snapshot); and the first over a new state once more as the
playground, /api/match-devices and ``match-devices`` evaluate a typed selector (within Kubernetes' cost
limit and the time and memory limits, ``domain.allocator.limits``; plain ``match_devices`` on a tree
without them).

Then (or alone, with ``--only hostile``) selectors that froze the server (issue 19), each typed into
a process of its own over one node of 8 GPUs: wall seconds, the process's peak RSS and what it
answered, cut at ``--hostile-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1]))

from collector.gcpause import collect_less_often  # noqa: E402
from demo import builders as b  # noqa: E402
from domain.allocator import device_checks, device_projection  # noqa: E402
from domain.allocator.matching import match_devices, simulate  # noqa: E402
from domain.cluster.state import MemoryHistory  # noqa: E402
from domain.inventory.devices import Inventory  # noqa: E402

CREATED = datetime(2026, 10, 1, tzinfo=UTC)
MIG = f"device.driver == '{b.GPU_DRIVER}' && device.attributes['{b.GPU_DRIVER}'].type == 'mig'"
MEMORY = f"device.capacity['{b.GPU_DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"


def plain(nodes: int, claims: int) -> list[dict[str, Any]]:
    objects = [b.device_class()]
    for i in range(nodes):
        node = f"n-{i}"
        model = b.H100_80GB if i % 2 else b.A100_40GB
        objects += [b.node(node, CREATED), b.resource_slice(node, b.gpu_devices(node, 8, model))]
        held = [("gpu", node, f"gpu-{k}") for k in range(4)]
        objects.append(b.claim("ml", f"held-{i}", [b.request(count=4)], CREATED, allocated=held))
    for j in range(claims):
        objects.append(b.claim("ml", f"p-{j}", [b.request(count=1 + j % 8, selectors=[MEMORY])], CREATED))
    return objects


def partitioned(nodes: int, claims: int) -> list[dict[str, Any]]:
    objects = [b.device_class(), b.device_class("mig.nvidia.com", selectors=[MIG])]
    for i in range(nodes):
        node = f"n-{i}"
        sets, devices = [], []
        for g in range(8):
            counters, gpu = b.partitioned_gpu(node, g)
            sets.append(counters)
            devices += gpu
        objects += [b.node(node, CREATED), b.counter_slice(node, sets), b.resource_slice(node, devices, slice_count=2)]
        held = [("gpu", node, f"gpu-{g}-mig-3g-0") for g in range(0, 8, 2)]
        objects.append(
            b.claim("ml", f"held-{i}", [b.request(device_class="mig.nvidia.com", count=4)], CREATED, allocated=held)
        )
    for j in range(claims):
        if j % 3 == 0:
            request, constraints = b.request(count=1 + j % 8), None
        elif j % 3 == 1:
            request, constraints = b.request(device_class="mig.nvidia.com", count=1 + j % 4), None
        else:
            request, constraints = b.request(count=2), [b.match_attribute(f"{b.GPU_DRIVER}/productName")]
        objects.append(b.claim("ml", f"p-{j}", [request], CREATED, constraints=constraints))
    return objects


def measure(name: str, objects: list[dict[str, Any]], claims: int, repeat: int) -> dict[str, Any]:
    times, reasons = [], Counter[str]()
    for _ in range(repeat):
        # A fresh state each time: a state keeps its inventory (and the simulator's caches hang off it).
        state = MemoryHistory([(CREATED, objects)]).state
        pending = [state.find("ResourceClaim", "ml", f"p-{j}") for j in range(claims)]
        inventory = Inventory.of(state)
        gc.collect()
        start = time.process_time()
        reasons = Counter(str(simulate(inventory, [c]).reason) for c in pending if c is not None)
        times.append(time.process_time() - start)
    return {
        "cluster": name,
        "devices": len(inventory.devices),
        "claims": claims,
        "cpu_s": round(min(times), 3),
        "all_cpu_s": [round(t, 3) for t in times],
        "reasons": dict(reasons),
        "load": os.getloadavg()[0],
    }


def measure_match(nodes: int) -> dict[str, Any]:
    objects = plain(nodes, 0)
    other = f"device.attributes['{b.GPU_DRIVER}'].productName.startsWith('NVIDIA H100')"
    out: dict[str, Any] = {"cluster": "plain", "nodes": nodes}
    steps = (("first expression, new state", MEMORY, True), ("another expression", other, False),
             ("first expression, next snapshot", MEMORY, True), ("first expression, new state, typed", MEMORY, True))
    state = None
    # As in a process that never saw these devices (the simulations above converted the same ones).
    device_checks._DEVICES.clear()
    device_checks._RESULTS.clear()
    for seen in (device_projection._DOMAINS, device_projection._VERSIONS, device_projection._QUANTITIES):
        seen.clear()
    for label, expression, fresh in steps:
        if fresh:
            state = MemoryHistory([(CREATED, objects)]).state
            Inventory.of(state)  # the inventory is built once per state, apart from matching
        gc.collect()
        match = typed_match if label.endswith("typed") else match_devices
        start, cpu = time.perf_counter(), time.process_time()
        found = match(state, expression, b.GPU_DRIVER)
        out[label] = round(time.perf_counter() - start, 3)
        out[f"{label}, cpu"] = round(time.process_time() - cpu, 3)  # steadier than wall on a shared machine
        out["devices"], out["matched"] = found["total"], len(found["matched"])
    out["load"] = os.getloadavg()[0]
    return out


def typed_match(state: Any, expression: str, class_name: str | None = None) -> dict[str, Any]:
    """What the playground, /api/match-devices and ``match-devices`` run (plain ``match_devices``
    on a tree without the limits)."""
    try:
        from domain.allocator.limits import match_devices_within_limits
    except ImportError:
        return match_devices(state, expression, class_name)
    return match_devices_within_limits(state, expression, class_name)


NINETY_NINE = "[" + ", ".join(str(i) for i in range(99)) + "]"


def _catastrophic(function: str, a: int) -> str:
    if function == "matches":
        return f"'{'a' * a}!'.matches('^(a+)+$')"
    return f"'{'a' * a}!'.{function}('^(a+)+$').size() == 0"


def _doubling(times: int, body: str = "size(s) > 0") -> str:
    return "cel.bind(s, 'a', " + "cel.bind(s, s + s, " * times + body + ")" * (times + 1)


HOSTILE = {
    "plain: memory >= 40Gi": MEMORY,
    "find(), 26 a's": _catastrophic("find", 26),
    "find(), 29 a's": _catastrophic("find", 29),
    "findAll(), 29 a's": _catastrophic("findAll", 29),
    "matches(), 29 a's": _catastrophic("matches", 29),
    "cel.bind doubling 26 times": _doubling(26),
    # Under the cost limit (estimated at 270,178) but 99 x 99 size() of 1 Mi characters: seconds of CPU.
    "size() of 1 Mi characters, 99 x 99 times": _doubling(
        20, f"{NINETY_NINE}.all(x, {NINETY_NINE}.all(y, size(s) > 0))"
    ),
}


def hostile_case(name: str) -> None:
    """One selector of HOSTILE, typed over one node of 8 GPUs: a JSON line on stdout."""
    import resource

    objects = [b.device_class(), b.node("n-0", CREATED), b.resource_slice("n-0", b.gpu_devices("n-0", 8))]
    state = MemoryHistory([(CREATED, objects)]).state
    Inventory.of(state)
    start = time.perf_counter()
    try:
        found = typed_match(state, HOSTILE[name])
        errors = {e["error"] for e in found["errors"]}
        outcome = f"{len(found['matched'])} of {found['total']} match"
        if errors:
            outcome += f"; errors: {sorted(errors)}"
    except Exception as e:  # noqa: BLE001 - what the surface would have shown
        outcome = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    forked = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # a forked evaluation's
    record = {"case": name, "seconds": round(seconds, 3), "peak_rss_mb": round(rss), "outcome": outcome[:300]}
    if forked:
        record["forked_peak_rss_mb"] = round(forked)
    print(json.dumps(record))


def measure_hostile(timeout: float) -> None:
    import subprocess

    for name in HOSTILE:
        start = time.perf_counter()
        try:
            run = subprocess.run(
                [sys.executable, __file__, "--hostile-case", name],
                capture_output=True, text=True, timeout=timeout, env=os.environ.copy(), check=False,
            )
            line = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else json.dumps(
                {"case": name, "outcome": f"exit {run.returncode}: {run.stderr.strip()[-300:]}"}
            )
        except subprocess.TimeoutExpired:
            line = json.dumps({"case": name, "seconds": f"> {timeout:g}", "outcome": "killed at the timeout"})
        record = json.loads(line)
        record["process_s"] = round(time.perf_counter() - start, 3)
        record["load"] = os.getloadavg()[0]
        print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--claims", type=int, default=99)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["plain", "partitioned", "match-devices", "hostile"])
    parser.add_argument("--hostile-timeout", type=float, default=120.0)
    parser.add_argument("--hostile-case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    collect_less_often()  # as in every Claimline process (collector.apps): the domain runs there
    if args.hostile_case:
        hostile_case(args.hostile_case)
        return
    for name, build in (("plain", plain), ("partitioned", partitioned)):
        if args.only in (None, name):
            print(json.dumps(measure(name, build(args.nodes, args.claims), args.claims, args.repeat)), flush=True)
    if args.only in (None, "match-devices"):
        print(json.dumps(measure_match(args.nodes)), flush=True)
    if args.only in (None, "hostile"):
        measure_hostile(args.hostile_timeout)


if __name__ == "__main__":
    main()
