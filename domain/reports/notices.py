"""What someone should be told about, as of a snapshot: the subjects of notices.

Five kinds, each with a subject key that stays the same while the condition
lasts, so the caller can store a notice once per subject and reason:

- ``leak``: a claim flagged by the retention (leak) rules (key: the claim's UID);
- ``pending-pod``: a Pod using DRA claims, pending longer than a threshold
  (key: the Pod's UID; the reason is its verdict's, as ``explain`` gives it, so a new
  blocking reason is a new notice);
- ``device-health``: a live Pod whose device kubelet reports Unhealthy (verdict ``device-unhealthy``;
  key: the Pod's UID);
- ``node-preparation``: preparation failures of several claims on one node,
  which points at the node's driver rather than at any one workload (key: the node);
- ``collection-failing``: the latest collections of a cluster all failed (key: the cluster).

Nothing here reads the clock: pending time and event recency are measured
against ``history.as_of``, collection failures from the runs passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from domain.boundaries.judgement import PREPARE_FAILURE_REASONS, event_last, is_terminal
from domain.cluster.pod_claims import resolve_pod_claims
from domain.cluster.state import HistoryView, Object, meta, ns_name, uid_of
from domain.cluster.timefmt import parse_time, rfc3339
from domain.reports.leaks import Thresholds, find_leaks
from domain.verdicts.explain import dated_verdict, outlook_sentences, verdict_reader

LEAK = "leak"
PENDING_POD = "pending-pod"
NODE_PREPARATION = "node-preparation"
DEVICE_HEALTH = "device-health"
COLLECTION_FAILING = "collection-failing"
# Kinds read from stored history; collection failures come from the runs alone.
HISTORY_KINDS = (LEAK, PENDING_POD, NODE_PREPARATION, DEVICE_HEALTH)
KINDS = (*HISTORY_KINDS, COLLECTION_FAILING)


@dataclass(frozen=True)
class NoticeThresholds:
    leaks: Thresholds = field(default_factory=Thresholds)
    # Seconds a DRA Pod may stay Pending before anyone is told.
    pending_after: float = 30 * 60
    # Preparation failures of this many distinct claims on one node make it a node problem.
    node_claims: int = 2
    # Only failures kubelet reported this recently count (Events expire after an hour by default).
    node_window: float = 60 * 60
    # This many failed collections in a row, with none succeeding since.
    failed_collections: int = 3


@dataclass(frozen=True)
class Subject:
    """One thing to tell: ``namespace`` routes it to the teams granted that namespace ("" = platform only)."""

    kind: str
    key: str
    reason: str
    message: str
    namespace: str = ""
    name: str = ""
    # What the message is about, for building a link: a claim or Pod UID, a node name.
    ref: dict[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.kind, self.key, self.reason)


@dataclass(frozen=True)
class Run:
    """One collection run of the cluster, as the notice rules need it."""

    at: datetime
    failed: bool
    error: str = ""


@dataclass
class Detection:
    """The current subjects, and which kinds were checked (a kind not checked says nothing about its notices)."""

    subjects: list[Subject]
    checked: tuple[str, ...]


def _hours_minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes} min"


# --- leaks --------------------------------------------------------------------------------------------


def leak_subjects(history: HistoryView, thresholds: Thresholds) -> list[Subject]:
    return [
        Subject(
            LEAK,
            claim["uid"],
            claim["reason"],
            claim["message"],
            namespace=claim["namespace"],
            name=f"{claim['namespace']}/{claim['name']}",
            ref={"claim": claim["uid"]},
        )
        for claim in find_leaks(history, thresholds)["claims"]
    ]


# --- pending Pods ---------------------------------------------------------------------------------------


def uses_dra(pod: Object) -> bool:
    """Claims in the spec, or one the scheduler made for an extended resource."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return bool(spec.get("resourceClaims") or status.get("extendedResourceClaimStatus"))


def _pending_since(pod: Object) -> datetime | None:
    if is_terminal(pod) or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return None
    if meta(pod).get("deletionTimestamp"):
        return None  # on its way out: nobody waits for it any more
    return parse_time(meta(pod).get("creationTimestamp"))


def pending_pod_subjects(
    history: HistoryView,
    pending_after: float,
    known: Mapping[str, str] | None = None,
    stored: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Subject]:
    """``known``: Pod UID → reason of the notice already open about it.

    ``stored``: the verdicts of exactly the Pods that wait, as derived when the snapshot was
    stored (a Pod absent from it is ``ok``). With them every pending Pod is told about once per
    reason, a changed reason too. Without them a Pod already told about is not judged again
    while it stays pending: judging costs a simulation over every node (~170 ms a Pod at
    1,000 nodes), and a cluster can have hundreds of Pods pending for hours. Its notice then
    stays open with the reason first announced, and resolves when the Pod stops pending.
    """
    at = history.as_of
    known = {} if stored is not None else known or {}
    out = []
    verdict_of = verdict_reader(history, stored, with_outlook=True)
    for pod in history.state.of_kind("Pod"):
        since = _pending_since(pod)
        if since is None or not uses_dra(pod) or at - since < timedelta(seconds=pending_after):
            continue
        namespace, name = ns_name(pod)
        if uid_of(pod) in known:
            out.append(Subject(PENDING_POD, uid_of(pod), known[uid_of(pod)], "still pending", namespace=namespace))
            continue
        verdict = verdict_of(pod)
        if verdict["reason"] == "ok":
            continue
        out.append(
            Subject(
                PENDING_POD,
                uid_of(pod),
                verdict["reason"],
                f"Pod {namespace}/{name} has been pending for {_hours_minutes(at - since)} "
                f"(since {rfc3339(since)}): {verdict['message']}"
                + "".join(f"; {sentence}" for sentence in outlook_sentences(dated_verdict(verdict, at))),
                namespace=namespace,
                name=f"{namespace}/{name}",
                ref={"pod": uid_of(pod), "namespace": namespace, "pod_name": name},
            )
        )
    return out


# --- devices kubelet reports unhealthy ------------------------------------------------------------------


def _reports_unhealthy(pod: Object) -> bool:
    """Whether any container status has a device kubelet reports Unhealthy: the only Pods worth judging."""
    status = pod.get("status") or {}
    return any(
        res.get("health") == "Unhealthy"
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or ()
        if isinstance(cs, dict)
        for entry in cs.get("allocatedResourcesStatus") or ()
        if isinstance(entry, dict) and str(entry.get("name") or "").startswith("claim:")
        for res in entry.get("resources") or ()
        if isinstance(res, dict)
    )


def device_health_subjects(
    history: HistoryView, stored: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Subject]:
    """Live Pods whose verdict is ``device-unhealthy``: a running workload on a failing GPU."""
    out = []
    verdict_of = verdict_reader(history, stored)
    for pod in history.state.of_kind("Pod"):
        if is_terminal(pod) or not _reports_unhealthy(pod):
            continue
        verdict = verdict_of(pod)
        if verdict["reason"] != "device-unhealthy":
            continue
        namespace, name = ns_name(pod)
        out.append(
            Subject(
                DEVICE_HEALTH,
                uid_of(pod),
                verdict["reason"],
                f"Pod {namespace}/{name}: {verdict['message']}",
                namespace=namespace,
                name=f"{namespace}/{name}",
                ref={"pod": uid_of(pod), "namespace": namespace, "pod_name": name},
            )
        )
    return out


# --- nodes whose driver fails to prepare --------------------------------------------------------------


def _failed_claims(history: HistoryView, pod: Object, message: str) -> set[str]:
    """The claims a failure is about: those it names, else every claim of the Pod."""
    claims = [pc.claim for pc in resolve_pod_claims(history, pod) if pc.claim is not None]
    named = {uid_of(c) for c in claims if ns_name(c)[1] in message or uid_of(c) in message}
    return named or {uid_of(c) for c in claims}


def node_preparation_subjects(history: HistoryView, min_claims: int, window: float) -> list[Subject]:
    at = history.as_of
    recent = at - timedelta(seconds=window)
    by_node: dict[str, dict[str, Any]] = {}
    for event in history.state.of_kind("Event"):
        if event.get("reason") not in PREPARE_FAILURE_REASONS:
            continue
        last = parse_time(event_last(event))
        if last is None or last < recent:
            continue
        involved = event.get("involvedObject") or event.get("regarding") or {}
        pod = history.state.get("Pod", str(involved.get("uid") or "")) if isinstance(involved, dict) else None
        node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        if pod is None or not node:
            continue
        seen = by_node.setdefault(node, {"claims": set(), "pods": set(), "last": last})
        seen["claims"] |= _failed_claims(history, pod, str(event.get("message") or ""))
        seen["pods"].add("/".join(ns_name(pod)))
        seen["last"] = max(seen["last"], last)
    out = []
    for node, seen in sorted(by_node.items()):
        if len(seen["claims"]) < min_claims:
            continue
        pods = sorted(seen["pods"])
        out.append(
            Subject(
                NODE_PREPARATION,
                node,
                "preparation-failed",
                f"kubelet on {node} failed to prepare {len(seen['claims'])} claims of {len(pods)} Pods "
                f"(last at {rfc3339(seen['last'])}): {', '.join(pods)}; the node's DRA driver is the common factor",
                name=node,
                ref={"node": node},
            )
        )
    return out


# --- collections ----------------------------------------------------------------------------------------


def collection_subjects(cluster: str, runs: Sequence[Run], min_failures: int) -> list[Subject]:
    """``runs`` newest first; the notice holds while the newest ``min_failures`` all failed."""
    streak = []
    for run in runs:
        if not run.failed:
            break
        streak.append(run)
    if len(streak) < min_failures:
        return []
    newest, oldest = streak[0], streak[-1]
    return [
        Subject(
            COLLECTION_FAILING,
            cluster,
            COLLECTION_FAILING,
            f"the last {len(streak)} collections of cluster {cluster} failed (since {rfc3339(oldest.at)}); "
            f"the latest: {newest.error or 'no error recorded'}",
            name=cluster,
            ref={"cluster": cluster},
        )
    ]


def detect(
    cluster: str,
    history: HistoryView | None,
    runs: Sequence[Run],
    thresholds: NoticeThresholds,
    pending_known: Mapping[str, str] | None = None,
    waiting_verdicts: Mapping[str, Mapping[str, Any]] | None = None,
) -> Detection:
    """Every current subject; without ``history`` (no usable snapshot yet) only collection failures."""
    subjects = collection_subjects(cluster, runs, thresholds.failed_collections)
    if history is None:
        return Detection(subjects, (COLLECTION_FAILING,))
    subjects += leak_subjects(history, thresholds.leaks)
    subjects += pending_pod_subjects(history, thresholds.pending_after, pending_known, waiting_verdicts)
    subjects += node_preparation_subjects(history, thresholds.node_claims, thresholds.node_window)
    subjects += device_health_subjects(history, waiting_verdicts)
    return Detection(subjects, KINDS)
