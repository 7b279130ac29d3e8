"""What the overview must say about the demo, counted straight from the story's objects (not from Claimline)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from demo.story import DEMO_BASE, DEMO_EXPECTATIONS, demo_stages, stage_times

TEAM = "ml-training"


def last_stage() -> list[dict[str, Any]]:
    return demo_stages(DEMO_BASE)[-1]


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _amount(value: str) -> int:
    """The story's quantities: plain integers or binary suffixes."""
    for suffix, factor in _UNITS.items():
        if value.endswith(suffix):
            return int(value[: -len(suffix)]) * factor
    return int(value)


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 2)


def devices_by_model(objects: list[dict[str, Any]] | None = None) -> dict[str, dict[str, float | int]]:
    """model -> advertised / allocated / free physical GPUs, from the slices and the claims' allocation results.

    A GPU advertised whole and as partitions drawing on one counter set is one GPU (named by its
    whole device); allocated counts what claims hold of it: the largest share of any counter the
    held devices consume, or for a device with allowMultipleAllocations the shares' consumedCapacity
    of its memory.
    """
    objects = objects if objects is not None else last_stage()
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for o in objects:
        if o["kind"] == "ResourceClaim":
            for r in (((o.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ():
                if not r.get("adminAccess"):
                    results.setdefault((r["driver"], r["pool"], r["device"]), []).append(r)
    totals: dict[tuple[str, str, str], dict[str, int]] = {}
    units: dict[tuple[str, str, str], dict[str, Any]] = {}
    for o in objects:
        if o["kind"] != "ResourceSlice":
            continue
        spec = o["spec"]
        driver, pool = spec["driver"], spec["pool"]["name"]
        for cs in spec.get("sharedCounters") or ():
            totals[(driver, pool, cs["name"])] = {n: _amount(c["value"]) for n, c in cs["counters"].items()}
        for d in spec.get("devices") or ():
            uses = d.get("consumesCounters") or []
            key = (driver, pool, uses[0]["counterSet"]) if uses else (driver, pool, d["name"])
            unit = units.setdefault(key, {"model": None, "used": {}, "share": 0.0})
            if unit["model"] is None or d["attributes"]["type"]["string"] == "gpu":
                unit["model"] = d["attributes"]["productName"]["string"]
            held = results.get((driver, pool, d["name"]), [])
            if d.get("allowMultipleAllocations"):
                memory = _amount(d["capacity"]["memory"]["value"])
                unit["share"] += sum(_amount(r["consumedCapacity"]["memory"]) for r in held) / memory
            elif held and uses:
                for name, c in uses[0]["counters"].items():
                    unit["used"][name] = unit["used"].get(name, 0) + _amount(c["value"])
            elif held:
                unit["share"] = 1.0
    advertised: Counter[str] = Counter()
    allocated: dict[str, float] = {}
    for key, unit in units.items():
        share = unit["share"]
        if unit["used"]:
            share = max(used / totals[key][name] for name, used in unit["used"].items())
        advertised[unit["model"]] += 1
        allocated[unit["model"]] = allocated.get(unit["model"], 0.0) + min(share, 1.0)
    return {
        m: {"advertised": n, "allocated": _number(allocated[m]), "free": _number(n - allocated[m])}
        for m, n in advertised.items()
    }


def stuck_pods(namespaces: set[str] | None = None) -> dict[str, set[str]]:
    """verdict reason -> namespace/name of the demo's live Pods that are not ok."""
    out: dict[str, set[str]] = {}
    for pod, (_boundary, reason) in DEMO_EXPECTATIONS["pods"].items():
        if reason != "ok" and (namespaces is None or pod.split("/")[0] in namespaces):
            out.setdefault(reason, set()).add(pod)
    return out


def report_gpu_hours() -> tuple[float, float]:
    """(held, leaked) device-hours of batch/report-gpu as of the last stage, from the story's own times.

    Held since its allocation (base - 3 h); leaked since its Pod finished (three minutes before
    stage 1) plus the 15 minute orphaned-allocation threshold.
    """
    base = DEMO_BASE
    finished = stage_times(base)[1] - timedelta(minutes=3)
    held = (base - (base - timedelta(hours=3))).total_seconds() / 3600
    leaked = (base - (finished + timedelta(minutes=15))).total_seconds() / 3600
    return round(held, 2), round(leaked, 2)
