"""Claimline's state as Prometheus text exposition (format 0.0.4), as of ``history.as_of``.

Every value is derived from stored history, so a scrape shows the cluster as of
the newest snapshot, not as of the scrape. Histograms are recomputed from the
claims and Pods live at that snapshot; they are gauges of a distribution, and
may go down when objects go away.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.boundaries.judgement import BOUNDARIES, FAILED, PREPARE_FAILURE_REASONS, event_count, is_terminal
from domain.boundaries.lifecycle import claim_lifecycles
from domain.cluster.claim_summaries import summarize_claim
from domain.cluster.pod_claims import pods_with_claims
from domain.cluster.state import HistoryView, Object, meta, ns_name, uid_of
from domain.cluster.timefmt import parse_time
from domain.inventory.devices import Inventory
from domain.inventory.equivalents import device_model, equivalents_by_model
from domain.reports.audit import (
    ADMIN_ACCESS_CLAIM,
    ADMIN_ACCESS_NAMESPACE,
    DEVICE_TAINT_RULE,
    DOUBLE_ALLOCATOR,
    FORCE_DELETED_CLAIM,
    STALE_INVENTORY,
    TEMPLATE_DRIFT,
    audit,
)
from domain.reports.leaks import REASONS, Thresholds, find_leaks
from domain.verdicts.explain import choose_verdict

PREFIX = "claimline_"
CLAIM_STATES = ("pending", "allocated", "reserved", "deleting")
BOUNDARY_STATES = ("ok", "pending", "failed", "unknown")
# Declared at zero so an alert on one kind has a series to compare before the first warning.
WARNING_KINDS = (
    STALE_INVENTORY,
    DOUBLE_ALLOCATOR,
    ADMIN_ACCESS_NAMESPACE,
    ADMIN_ACCESS_CLAIM,
    TEMPLATE_DRIFT,
    DEVICE_TAINT_RULE,
    FORCE_DELETED_CLAIM,
)
RUN_STATUSES = ("ok", "partial", "failed")
# Seconds: from an immediate allocation to a claim that waited a day for devices.
ALLOCATION_WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 3600, 6 * 3600, 24 * 3600)
# Seconds: driver preparation is normally seconds; a DeadlineExceeded retry loop is minutes.
PREPARATION_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

Labels = tuple[tuple[str, str], ...]
# The namespaces named in the namespaced families (pending Pods, flagged claims): the N with the most,
# the rest added up under OTHER_NAMESPACE, so a cluster of thousands of namespaces exports a bounded
# number of series (Alertmanager routes on ``namespace``). No Kubernetes namespace can be named so.
NAMESPACE_CAP = 20
OTHER_NAMESPACE = "(other)"
HOUR = 3600.0


@dataclass(frozen=True)
class CollectionHealth:
    """The scraped cluster's snapshot runs, as read from the database by the caller.

    ``last_run_*`` is the newest finished run whatever its status; ``failures_since_success``
    counts failed runs newer than the newest usable (ok or partial) snapshot, which is
    the snapshot the other families describe.
    """

    last_run_at: datetime | None
    last_run_status: str | None
    failures_since_success: int


@dataclass
class Family:
    """One metric family: its HELP/TYPE header and samples."""

    name: str
    type: str
    help: str
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def set(self, value: float, **labels: str) -> None:
        self.samples[("", _labels(labels))] = value

    def add(self, value: float, **labels: str) -> None:
        key = ("", _labels(labels))
        self.samples[key] = self.samples.get(key, 0) + value

    def maximum(self, value: float, **labels: str) -> None:
        key = ("", _labels(labels))
        self.samples[key] = max(self.samples.get(key, value), value)

    def observe_all(self, values: Sequence[float], buckets: Sequence[float], **labels: str) -> None:
        base = _labels(labels)
        for le in buckets:
            self.samples[("_bucket", (*base, ("le", _number(le))))] = sum(1 for v in values if v <= le)
        self.samples[("_bucket", (*base, ("le", "+Inf")))] = len(values)
        self.samples[("_sum", base)] = sum(values)
        self.samples[("_count", base)] = len(values)

    def render(self) -> list[str]:
        full = PREFIX + self.name
        lines = [f"# HELP {full} {_escape_help(self.help)}", f"# TYPE {full} {self.type}"]
        # Buckets keep their le order; everything else is sorted so output is stable.
        order = sorted(self.samples, key=lambda k: (k[1][:-1] if k[0] == "_bucket" else k[1], k[0] != "_bucket"))
        for suffix, labels in order:
            lines.append(f"{full}{suffix}{_render_labels(labels)} {_number(self.samples[(suffix, labels)])}")
        return lines


def _labels(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def escape_label_value(value: str) -> str:
    """Backslash, double quote and newline are the three characters the format escapes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels) + "}"


def _number(value: float) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if value.is_integer():
            return str(int(value))
        return repr(round(value, 6))
    return str(value)


# --- the families -------------------------------------------------------------------------------------


def _inventory_families(history: HistoryView, inventory: Inventory) -> list[Family]:
    advertised = Family("devices_advertised", "gauge", "Devices advertised by ResourceSlices (newest pool generation).")
    allocated = Family("devices_allocated", "gauge", "Advertised devices held by an allocated ResourceClaim.")
    age = Family("inventory_age_seconds", "gauge", "Seconds since the newest stored version of a pool's slices.")
    for device in inventory.devices:
        where = {"driver": device.driver, "pool": device.pool, "node": device.node_name or ""}
        advertised.add(1, **where)
        allocated.add(1 if device.id in inventory.holders else 0, **where)
    newest: dict[tuple[str, str], datetime] = {}
    # Each slice's versions once, not once per device it lists.
    pools = {device.slice_uid: (device.driver, device.pool) for device in inventory.devices}
    for slice_uid, key in pools.items():
        versions = history.versions("ResourceSlice", slice_uid)
        if versions:
            newest[key] = max(newest.get(key, versions[-1].at), versions[-1].at)
    for (driver, pool), at in sorted(newest.items()):
        age.set((history.as_of - at).total_seconds(), driver=driver, pool=pool)
    return [advertised, allocated, age, *_model_families(inventory)]


def _model_families(inventory: Inventory) -> list[Family]:
    """Per model (the productName attribute) rather than per pool: the capacity a platform team buys."""
    advertised = Family("model_devices_advertised", "gauge", "Advertised devices by driver and model (productName).")
    allocated = Family(
        "model_devices_allocated", "gauge", "Advertised devices held by an allocated claim, by driver and model."
    )
    for device in inventory.devices:
        which = {"driver": device.driver, "model": device_model(device)}
        advertised.add(1, **which)
        allocated.add(1 if device.id in inventory.holders else 0, **which)
    # Partitions and shares of one GPU are several devices above; here each physical GPU counts once.
    gpu_advertised = Family(
        "model_gpu_equivalents_advertised", "gauge", "Physical GPUs advertised (partitions counted once), by model."
    )
    gpu_allocated = Family(
        "model_gpu_equivalents_allocated",
        "gauge",
        "GPU-equivalents held by allocated claims (a partition or a share counts its fraction), by model.",
    )
    for row in equivalents_by_model(inventory):
        gpu_advertised.add(row.advertised, driver=row.driver, model=row.model)
        gpu_allocated.add(float(row.allocated), driver=row.driver, model=row.model)
    return [advertised, allocated, gpu_advertised, gpu_allocated]


def _warning_family(history: HistoryView, audit_doc: Mapping[str, Any] | None) -> Family:
    family = Family("inventory_warnings", "gauge", "Platform warnings (the audit report) by kind.")
    for kind in WARNING_KINDS:
        family.set(0, kind=kind)
    for warning in (audit_doc if audit_doc is not None else audit(history))["warnings"]:
        family.add(1, kind=warning["kind"])
    return family


def _claim_state_family(history: HistoryView) -> Family:
    family = Family("claims", "gauge", "ResourceClaims by allocation state (pending, allocated, reserved, deleting).")
    for state in CLAIM_STATES:
        family.set(0, state=state)
    for claim in history.state.of_kind("ResourceClaim"):
        family.add(1, state=summarize_claim(claim).state)
    return family


# What the boundary families count of a live Pod: its verdict's (boundary, reason), and per claim
# its key (UID, or name when unresolved), each boundary's state, the runtime reason and the node.
ClaimCounts = tuple[str, dict[str, str], str | None, str | None]
PodCounts = tuple[tuple[str | None, str], list[ClaimCounts]]
# A Pod's counts when a caller already has them (e.g. stored explain documents); None for a Pod
# it has not, which is then judged here.
CountsOf = Callable[[Object], PodCounts | None]


@dataclass(frozen=True)
class Known:
    """What a caller read of the snapshot already (the derived layer's rows): each part given
    replaces a pass over the whole state, so /metrics at thousands of nodes does not judge every
    Pod, rerun the leak report and the audit, or decode every live Event again."""

    counts_of: CountsOf | None = None  # a Pod's counts instead of judging it
    leaks: Mapping[str, Any] | None = None  # the leak report (find_leaks) as of the snapshot
    audit: Mapping[str, Any] | None = None  # the audit document as of the snapshot
    # The live Events that may be preparation failures (a superset: each is checked here).
    preparation_events: Sequence[Object] | None = None


def pod_counts(verdict: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> PodCounts:
    """What the boundary families count, from explain's verdict and claim documents."""
    return (
        (verdict["boundary"], verdict["reason"]),
        [
            (
                c.get("uid") or c["name"],
                {b: c["boundaries"][b]["state"] for b in BOUNDARIES},
                c["boundaries"]["runtime"].get("reason"),
                c.get("node"),
            )
            for c in claims
        ],
    )


def _boundary_families(
    history: HistoryView, inventory: Inventory, known: Known, namespace_cap: int = NAMESPACE_CAP
) -> list[Family]:
    by_state = Family(
        "claim_boundaries",
        "gauge",
        "Claims of live, unfinished Pods by boundary (inventory, allocation, preparation, runtime) and state.",
    )
    injection = Family(
        "runtime_injection_failures",
        "gauge",
        "Claims whose container cannot be created or started with the device injected (runtime-injection-failed).",
    )
    unhealthy = Family(
        "unhealthy_device_claims",
        "gauge",
        "Claims of live Pods with a device kubelet reports Unhealthy in allocatedResourcesStatus (device-unhealthy).",
    )
    prep_failed = Family(
        "preparation_failed_claims",
        "gauge",
        "Claims of live Pods whose preparation boundary failed, by the node that failed to prepare them.",
    )
    pending = Family(
        "pending_pods",
        "gauge",
        "Live Pods with claims whose verdict is not ok, by namespace, verdict boundary and reason; "
        f"{_capped(namespace_cap)}",
    )
    oldest = Family(
        "pending_pod_max_age_seconds",
        "gauge",
        "Seconds since creation of the oldest live Pod with that namespace, verdict boundary and reason; "
        f"{_capped(namespace_cap)}",
    )
    waiting: list[tuple[str, dict[str, str], float]] = []
    for boundary in BOUNDARIES:
        for state in BOUNDARY_STATES:
            by_state.set(0, boundary=boundary, state=state)
    seen: set[tuple[str, str]] = set()
    for pod in pods_with_claims(history.state):
        if is_terminal(pod):
            continue  # finished Pods' claims are the leak report's business
        namespace, _ = ns_name(pod)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        counts = known.counts_of(pod) if known.counts_of is not None else None
        if counts is None:
            lifecycles = claim_lifecycles(history, pod, inventory=inventory)
            counts = pod_counts(choose_verdict(pod, lifecycles), (lc.to_dict() for lc in lifecycles))
        verdict, claims = counts
        if verdict[0] is not None:
            waiting.append((namespace, {"boundary": str(verdict[0]), "reason": str(verdict[1])}, _age(history, pod)))
        for claim_key, states, runtime_reason, claim_node in claims:
            key = (uid_of(pod), claim_key)
            if key in seen:
                continue
            seen.add(key)
            for boundary in BOUNDARIES:
                by_state.add(1, boundary=boundary, state=states[boundary])
            if runtime_reason == "runtime-injection-failed":
                injection.add(1, namespace=namespace, node=node)
            elif runtime_reason == "device-unhealthy":
                unhealthy.add(1, namespace=namespace, node=claim_node or node)
            if states["preparation"] == FAILED:
                prep_failed.add(1, node=claim_node or node)
    named = _top_namespaces(namespace_cap, ((ns, 1.0) for ns, _, _ in waiting))
    for ns, where, age in waiting:
        label = ns if ns in named else OTHER_NAMESPACE
        pending.add(1, namespace=label, **where)
        oldest.maximum(age, namespace=label, **where)
    return [by_state, injection, unhealthy, prep_failed, pending, oldest]


def _age(history: HistoryView, pod: Object) -> float:
    """A Pod counts from its creation: how long it has waited is what "pending for N minutes" means."""
    created = parse_time(meta(pod).get("creationTimestamp"))
    return max((history.as_of - created).total_seconds(), 0.0) if created else 0.0


def _capped(cap: int) -> str:
    return (
        f"the {cap} namespaces with the most are named, the rest are added up as namespace=\"{OTHER_NAMESPACE}\""
        if cap
        else f"every namespace is added up as namespace=\"{OTHER_NAMESPACE}\""
    )


def _top_namespaces(cap: int, weights: Iterable[tuple[str, float]]) -> set[str]:
    """The ``cap`` namespaces of the largest total weight (ties: by name), named in the namespaced
    families; the rest share OTHER_NAMESPACE, so the series stay bounded however many namespaces."""
    totals: dict[str, float] = {}
    for namespace, weight in weights:
        totals[namespace] = totals.get(namespace, 0.0) + weight
    return set(sorted(totals, key=lambda ns: (-totals[ns], ns))[:cap])


def _allocation_waits(history: HistoryView) -> list[float]:
    waits = []
    for claim in history.state.of_kind("ResourceClaim"):
        created = parse_time(meta(claim).get("creationTimestamp"))
        alloc = (claim.get("status") or {}).get("allocation") or {}
        allocated_at = parse_time(alloc.get("allocationTimestamp")) if isinstance(alloc, dict) else None
        if created and allocated_at and allocated_at >= created:
            waits.append((allocated_at - created).total_seconds())
    return waits


def _condition_time(pod: Object, type_: str) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_ and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def _preparation_times(history: HistoryView) -> list[float]:
    """Scheduled (and every claim allocated) → PodReadyToStartContainers, for Pods that got there."""
    times = []
    for pod in pods_with_claims(history.state):
        ready = _condition_time(pod, "PodReadyToStartContainers")
        scheduled = _condition_time(pod, "PodScheduled")
        if ready is None or scheduled is None:
            continue
        start = scheduled
        namespace, _ = ns_name(pod)
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            claim = history.state.find("ResourceClaim", namespace, str(entry.get("resourceClaimName")))
            alloc = ((claim or {}).get("status") or {}).get("allocation") or {}
            allocated_at = parse_time(alloc.get("allocationTimestamp")) if isinstance(alloc, dict) else None
            if allocated_at and allocated_at > start:
                start = allocated_at
        if ready >= start:
            times.append((ready - start).total_seconds())
    return times


def _preparation_failures(history: HistoryView, known: Known) -> Family:
    family = Family(
        "preparation_failures_total",
        "counter",
        "FailedPrepareDynamicResources events (with their repeat counts) by namespace and node.",
    )
    events = known.preparation_events
    for ev in sorted(history.state.of_kind("Event") if events is None else events, key=uid_of):
        if ev.get("reason") not in PREPARE_FAILURE_REASONS:
            continue
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        source = ev.get("source") or {}
        node = str(source.get("host") or ev.get("reportingInstance") or "")
        family.add(event_count(ev), namespace=str(involved.get("namespace") or ns_name(ev)[0]), node=node)
    return family


def _leak_families(
    history: HistoryView,
    thresholds: Thresholds,
    leaks: Mapping[str, Any] | None,
    namespace_cap: int = NAMESPACE_CAP,
) -> list[Family]:
    capped = _capped(namespace_cap)
    flagged = Family(
        "flagged_claims",
        "gauge",
        f"Claims flagged as holding devices they should not, by namespace and reason; {capped}.",
    )
    # Seconds, Prometheus' base unit (the leaks report's device-hours are this / 3600).
    seconds = Family(
        "flagged_device_seconds",
        "gauge",
        "Device-seconds (devices x seconds, /3600 for the leaks report's device-hours) held since allocation by "
        f"flagged claims, by namespace and reason; {capped}.",
    )
    devices = Family("flagged_devices", "gauge", f"Devices held by flagged claims, by namespace and reason; {capped}.")
    equivalents = Family(
        "flagged_gpu_equivalent_seconds",
        "gauge",
        "GPU-equivalent seconds (/3600 for GPU-equivalent hours) held since allocation by flagged claims, a partition "
        f"or share counting its fraction, by namespace and reason; {capped}.",
    )
    # Declared at zero under OTHER_NAMESPACE so an alert or a panel has a series before the first flag.
    for reason in REASONS:
        for family in (flagged, seconds, devices, equivalents):
            family.set(0, namespace=OTHER_NAMESPACE, reason=reason)
    claims = (leaks if leaks is not None else find_leaks(history, thresholds))["claims"]
    named = _top_namespaces(namespace_cap, ((c["namespace"], float(len(c["devices"]))) for c in claims))
    for claim in claims:
        where = {"namespace": claim["namespace"] if claim["namespace"] in named else OTHER_NAMESPACE}
        where["reason"] = claim["reason"]
        flagged.add(1, **where)
        seconds.add(float(claim["device_hours"]) * HOUR, **where)
        devices.add(len(claim["devices"]), **where)
        equivalents.add(float(claim["gpu_equivalent_hours"]) * HOUR, **where)
    return [flagged, devices, seconds, equivalents]


def _collection_families(health: CollectionHealth) -> list[Family]:
    last_run = Family(
        "collection_last_run_timestamp_seconds", "gauge", "Unix time of the newest finished snapshot run."
    )
    status = Family("collection_last_run_status", "gauge", "1 for the newest finished snapshot run's status, else 0.")
    failures = Family(
        "collection_failures_since_success",
        "gauge",
        "Failed snapshot runs newer than the newest usable (ok or partial) snapshot.",
    )
    if health.last_run_at is not None:
        last_run.set(health.last_run_at.timestamp())
    for name in RUN_STATUSES:
        status.set(1 if health.last_run_status == name else 0, status=name)
    failures.set(health.failures_since_success)
    return [last_run, status, failures]


@dataclass(frozen=True)
class Served:
    """The families a scrape adds to the text rendered after a derivation: cheap, so computed when
    served. A stored text stands for later snapshots that changed nothing (CLAIMLINE_METRICS_REFRESH),
    so ``as_of`` is the newest usable snapshot, not the one the text was rendered from, and the age
    does not saw-tooth with the refresh."""

    as_of: datetime  # the newest usable snapshot, which the rest describes
    now: datetime | None = None  # the scrape's time: claimline_snapshot_age_seconds (none in tests)
    collection: CollectionHealth | None = None  # the run-health families
    dashboard_url: str | None = None  # the cluster's page: claimline_dashboard_info{url}


def served_families(served: Served) -> list[Family]:
    as_of = Family(
        "as_of_timestamp_seconds",
        "gauge",
        "Unix time of the snapshot these metrics describe: the newest usable (ok or partial) one.",
    )
    as_of.set(served.as_of.timestamp())
    out = [as_of]
    if served.now is not None:
        age = Family(
            "snapshot_age_seconds",
            "gauge",
            "Seconds from the newest usable snapshot to this scrape (computed when served; normally under "
            "CLAIMLINE_COLLECT_INTERVAL while watching or polling).",
        )
        age.set(max((served.now - served.as_of).total_seconds(), 0.0))
        out.append(age)
    if served.dashboard_url is not None:
        info = Family(
            "dashboard_info",
            "gauge",
            "Always 1; url is the cluster's page in Claimline (absolute with CLAIMLINE_BASE_URL), for alert "
            "annotations and dashboard links.",
        )
        info.set(1, url=served.dashboard_url)
        out.append(info)
    if served.collection is not None:
        out.extend(_collection_families(served.collection))
    return out


def families(
    history: HistoryView,
    thresholds: Thresholds | None = None,
    known: Known | None = None,
    namespace_cap: int = NAMESPACE_CAP,
) -> list[Family]:
    """Every family rendered after a derivation, as of ``history.as_of``; ``known``: what the caller
    has read of it already. The ``Served`` families complete them."""
    known = known or Known()
    inventory = Inventory.of(history.state)
    wait = Family("allocation_wait_seconds", "histogram", "Live claims: creationTimestamp to allocationTimestamp.")
    wait.observe_all(_allocation_waits(history), ALLOCATION_WAIT_BUCKETS)
    prep = Family(
        "preparation_seconds",
        "histogram",
        "Live Pods with claims: scheduled and allocated to PodReadyToStartContainers (devices prepared).",
    )
    prep.observe_all(_preparation_times(history), PREPARATION_BUCKETS)
    return [
        *_inventory_families(history, inventory),
        _claim_state_family(history),
        *_boundary_families(history, inventory, known, namespace_cap),
        wait,
        prep,
        _preparation_failures(history, known),
        *_leak_families(history, thresholds or Thresholds(), known.leaks, namespace_cap),
        _warning_family(history, known.audit),
    ]


def _text(families: Iterable[Family]) -> str:
    return "\n".join(line for family in families for line in family.render()) + "\n"


def render_stored(
    history: HistoryView,
    thresholds: Thresholds | None = None,
    known: Known | None = None,
    namespace_cap: int = NAMESPACE_CAP,
) -> str:
    """The text a derivation stores: every family but the ``Served`` ones, which ``render_served`` adds."""
    return _text(families(history, thresholds, known, namespace_cap))


def render_served(served: Served) -> str:
    """The ``Served`` families: appended to a stored text, they make the whole exposition."""
    return _text(served_families(served))


def render_metrics(
    history: HistoryView,
    thresholds: Thresholds | None = None,
    collection: CollectionHealth | None = None,
    known: Known | None = None,
    namespace_cap: int = NAMESPACE_CAP,
    served: Served | None = None,
) -> str:
    """The whole exposition text; ends with a newline as the format requires.

    ``collection`` adds the run-health families; without it (a dump, a test) they are left out.
    ``served`` (with its own ``collection``) replaces what is added after the stored part.
    """
    served = served or Served(history.as_of, collection=collection)
    return render_stored(history, thresholds, known, namespace_cap) + render_served(served)
