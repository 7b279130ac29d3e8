"""What the four boundaries of a Pod's claims are judged with: the verdict shapes, the Pod's context, its events.

``lifecycle`` judges inventory, allocation and preparation, ``runtime`` the
runtime boundary, ``timeline`` lays the same evidence out in time; all of them
read the Pod, its conditions and its events through the helpers here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain.allocator.matching import SelectorCache
from domain.cluster.events import involved_of, newest_content, subject_key
from domain.cluster.pod_claims import PodClaim
from domain.cluster.state import HistoryView, Object, meta, ns_name, spec_of, status_of, uid_of
from domain.cluster.timefmt import parse_time
from domain.inventory.devices import AllocatedDevice, Inventory

BOUNDARIES = ("inventory", "allocation", "preparation", "runtime")
OK, PENDING, FAILED, UNKNOWN = "ok", "pending", "failed", "unknown"

TERMINAL_PHASES = ("Succeeded", "Failed")
PREPARE_FAILURE_REASONS = ("FailedPrepareDynamicResources", "FailedPrepareResources")
RUNTIME_ERROR_REASONS = ("CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun")
_MAX_QUOTE = 400


@dataclass
class Boundary:
    state: str
    since: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None  # a DESIGN.md reason code when the boundary blocks
    message: str | None = None  # one sentence naming the evidence
    # What the judgement was made from, for what the verdict adds (allocation: ``AllocationTrial``); never stored.
    basis: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "since": self.since, "evidence": self.evidence}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


@dataclass(frozen=True)
class AllocationTrial:
    """The simulation a waiting claim's allocation verdict came from, and how to run it again."""

    simulation: Any  # allocator.matching.Simulation
    claims: tuple[Object, ...]
    nodes: tuple[str, ...] | None
    siblings: tuple[str, ...]
    cache: SelectorCache
    inventory: Inventory


def is_device_check(evidence: Mapping[str, Any]) -> bool:
    """A simulation's verdict on one device: the pages show these apart from the rest of the evidence
    (the Pod page lists them, the claim page counts them), as there can be thousands."""
    return evidence.get("kind") == "DeviceMatch" and "device" in evidence


@dataclass
class ClaimLifecycle:
    pod_claim: PodClaim
    boundaries: dict[str, Boundary]
    devices: list[AllocatedDevice] = field(default_factory=list)
    node: str | None = None

    @property
    def uid(self) -> str | None:
        return self.pod_claim.uid

    @property
    def name(self) -> str:
        return self.pod_claim.claim_name or self.pod_claim.pod_claim_name

    def to_dict(self) -> dict[str, Any]:
        out = {
            "uid": self.uid,
            "name": self.name,
            "pod_claim": self.pod_claim.pod_claim_name,
            "node": self.node,
            "devices": [
                {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device} for d in self.devices
            ],
            "boundaries": {name: self.boundaries[name].to_dict() for name in BOUNDARIES},
        }
        if self.pod_claim.extended is not None:
            out["extended_resources"] = self.pod_claim.extended.to_dict()
        return out


# --- small readers ---------------------------------------------------------------------------------


def pod_condition(pod: Object, type_: str) -> dict[str, Any] | None:
    for cond in status_of(pod).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def condition_evidence(cond: Mapping[str, Any]) -> dict[str, Any]:
    out = {"kind": "Condition", "type": cond.get("type"), "status": cond.get("status")}
    for key in ("reason", "message", "lastTransitionTime"):
        if cond.get(key):
            out[key] = cond[key]
    return out


def event_first(ev: Object) -> str | None:
    return ev.get("firstTimestamp") or ev.get("eventTime") or meta(ev).get("creationTimestamp")


def _series(ev: Object) -> dict[str, Any]:
    series = ev.get("series")
    return series if isinstance(series, dict) else {}


def event_last(ev: Object) -> str | None:
    series = _series(ev)
    return ev.get("lastTimestamp") or series.get("lastObservedTime") or event_first(ev)


def event_count(ev: Object) -> int:
    series = _series(ev)
    try:
        return int(ev.get("count") or series.get("count") or 1)
    except (TypeError, ValueError):
        return 1


def event_evidence(ev: Object) -> dict[str, Any]:
    return {
        "kind": "Event",
        "reason": ev.get("reason"),
        "message": ev.get("message"),
        "count": event_count(ev),
        "first": event_first(ev),
        "last": event_last(ev),
    }


def later(a: str | None, b: str | None) -> bool:
    """Whether time ``a`` is strictly after ``b`` (unknown times never are)."""
    ta, tb = parse_time(a), parse_time(b)
    return ta is not None and tb is not None and ta > tb


_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


def time_key(value: str | None) -> datetime:
    """For sorting: unknown times first."""
    return parse_time(value) or _NEVER


def quote(text: str | None) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 1] + "…"


def short_time(value: str | None) -> str:
    return value or "an unknown time"


def is_terminal(pod: Object) -> bool:
    return status_of(pod).get("phase") in TERMINAL_PHASES


# --- events ----------------------------------------------------------------------------------------


def related_events(history: HistoryView, pod: Object, claim_uids: Iterable[str] = ()) -> list[Object]:
    """Events about the Pod incarnation (by UID) or its claims, including ones the cluster expired.

    The last stored content of each event counts, so a count that grew is read at its newest.
    Ties in time and reason are broken by the Event's UID: the order then depends neither on the
    order the history gives the Events in nor on how it found them.
    """
    since = parse_time(meta(pod).get("creationTimestamp"))
    subjects = {uid_of(pod), *claim_uids} - {""}
    pod_name = ns_name(pod)
    out = []
    for versions in history.events_about(subjects, [pod_name]):
        event = newest_content(versions)
        involved = involved_of(event) if event is not None else None
        key = subject_key(involved) if involved is not None else None
        if event is None or key is None or (key not in subjects and key != pod_name):
            continue  # a history may answer with more Events than asked about
        # When the event was last valid: a deletion after it, or still live.
        last_seen = versions[-1].at if versions[-1].obj is None else history.as_of
        if since is None or last_seen >= since:
            out.append(event)
    return sorted(out, key=lambda e: (time_key(event_first(e)), str(e.get("reason")), uid_of(e)))


# --- one Pod incarnation ---------------------------------------------------------------------------


@dataclass
class PodContext:
    """Everything the boundaries of one Pod incarnation read, gathered once."""

    history: HistoryView
    pod: Object
    inventory: Inventory
    events: list[Object]
    gone_at: datetime | None = None
    observed_uuids: Mapping[str, str] | None = None
    cache: SelectorCache = field(default_factory=SelectorCache)
    claims: list[ClaimLifecycle] = field(default_factory=list)

    @property
    def node_name(self) -> str | None:
        name = spec_of(self.pod).get("nodeName")
        return str(name) if name else None

    @property
    def phase(self) -> str:
        return str(status_of(self.pod).get("phase") or "")

    @property
    def settled(self) -> bool:
        """Finished: no scheduler or kubelet will act on it again, so waiting means nothing."""
        return is_terminal(self.pod)

    def events_with(self, reasons: Sequence[str]) -> list[Object]:
        return [e for e in self.events if e.get("reason") in reasons]


def _about(text: str, lc: ClaimLifecycle, siblings: Sequence[ClaimLifecycle]) -> bool:
    """Whether a Pod event (events are not per claim) is about this claim.

    An event naming claims (by name or UID) is about those; one naming a driver is
    about the claims with devices of that driver; one naming neither, about all.
    """
    named = [
        o for o in siblings if (o.pod_claim.claim_name and o.pod_claim.claim_name in text) or (o.uid and o.uid in text)
    ]
    if named:
        return any(o is lc for o in named)
    drivers = {d.driver for o in siblings for d in o.devices if d.driver and d.driver in text}
    if drivers:
        return any(d.driver in drivers for d in lc.devices)
    return True


def events_for_claim(events: list[Object], lc: ClaimLifecycle, siblings: Sequence[ClaimLifecycle]) -> list[Object]:
    return [e for e in events if _about(str(e.get("message") or ""), lc, siblings)]


def containers_started(pod: Object) -> list[str]:
    """startedAt of every container run that started (running now, or finished after starting)."""
    out = []
    for cs in container_statuses(pod):
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if "running" in state and (state["running"] or {}).get("startedAt"):
                out.append(state["running"]["startedAt"])
            term = state.get("terminated") or {}
            if term.get("startedAt") and term.get("reason") not in RUNTIME_ERROR_REASONS:
                out.append(term["startedAt"])
    return out


def container_statuses(pod: Object) -> list[dict[str, Any]]:
    status = status_of(pod)
    return [
        cs
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or ()
        if isinstance(cs, dict)
    ]
