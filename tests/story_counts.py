"""What the overview must say about the demo, counted straight from the story's objects (not from Claimline)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from demo.story import DEMO_BASE, DEMO_EXPECTATIONS, demo_stages, stage_times

TEAM = "ml-training"


def last_stage() -> list[dict[str, Any]]:
    return demo_stages(DEMO_BASE)[-1]


def devices_by_model(objects: list[dict[str, Any]] | None = None) -> dict[str, dict[str, int]]:
    """model -> advertised / allocated / free, from the slices and the claims' allocation results."""
    objects = objects if objects is not None else last_stage()
    held = {
        (r["driver"], r["pool"], r["device"])
        for o in objects
        if o["kind"] == "ResourceClaim"
        for r in (((o.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
        if not r.get("adminAccess")
    }
    advertised: Counter[str] = Counter()
    allocated: Counter[str] = Counter()
    for o in objects:
        if o["kind"] != "ResourceSlice":
            continue
        spec = o["spec"]
        for d in spec["devices"]:
            model = d["attributes"]["productName"]["string"]
            advertised[model] += 1
            allocated[model] += (spec["driver"], spec["pool"]["name"], d["name"]) in held
    return {m: {"advertised": n, "allocated": allocated[m], "free": n - allocated[m]} for m, n in advertised.items()}


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
