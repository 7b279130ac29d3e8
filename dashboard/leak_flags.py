"""Leak flags beside the claims a page shows: read from the derived layer's stored flags of those claims, scoped,
with what would release each."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.history_reader import StoredHistory
from derived.reports import leak_flags_read
from derived.thresholds import leak_thresholds
from domain.reports.leaks import FAILING_POD, ORPHANED, STUCK_DELETION, UNRESERVED
from domain.reports.redaction import Scope


def release_of(entry: dict[str, Any]) -> dict[str, str]:
    """The kubectl command that releases the flagged claim's devices, and what it means."""
    ns, name = entry["namespace"], entry["name"]
    reason = entry["reason"]
    if reason in (ORPHANED, UNRESERVED):
        return {
            "command": f"kubectl delete resourceclaim -n {ns} {name}",
            "note": "No Pod uses the claim any more: deleting it returns its devices.",
        }
    if reason == STUCK_DELETION:
        return {
            "command": f"kubectl get resourceclaim -n {ns} {name} -o jsonpath='{{.metadata.finalizers}}'",
            "note": "The claim is being deleted but a finalizer keeps it: the DRA driver or controller named "
            "there must release it (deallocate and remove its finalizer).",
        }
    if reason == FAILING_POD:
        consumers = [c["name"] for c in entry.get("consumers") or () if c.get("resource") == "pods"]
        pod = consumers[0] if consumers else "<pod>"
        return {
            "command": f"kubectl delete pod -n {ns} {pod}",
            "note": "The Pod holding the claim cannot run: fix or delete it to release the devices.",
        }
    return {"command": "", "note": ""}


def flag_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What the shared partial shows of one leak report entry."""
    return {
        "uid": entry["uid"],
        "namespace": entry["namespace"],
        "name": entry["name"],
        "reason": entry["reason"],
        "held_since": entry["held_since"],
        "flagged_since": entry["flagged_since"],
        "observed_since": entry["observed_since"],
        "device_hours": entry["device_hours"],
        "leaked_device_hours": entry["leaked_device_hours"],
        "devices": [f"{d.get('pool')}/{d.get('device')}" for d in entry.get("devices") or ()],
        **release_of(entry),
    }


def flags_for(history: StoredHistory, scope: Scope, uids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The flags of the claims ``uids`` (those a page shows) the scope sees, by UID: the derived layer's
    stored flags of just those claims, one query however many the page shows."""
    return flags_of(leak_flags_read(history, leak_thresholds(), uids), scope)


def flags_of(entries: Iterable[dict[str, Any]], scope: Scope) -> dict[str, dict[str, Any]]:
    """The flags of leak report ``entries`` the scope sees, by claim UID."""
    return {str(e["uid"]): flag_of(e) for e in entries if scope.sees(e.get("namespace"))}
