"""Each judged claim's four boundary states as rows (``ClaimJudgement``), written with the Pod
explanations they come from, and read by the claim page.

A claim's part of a Pod's document (``verdicts.explain_incarnation``) is the one definition: a
row is that part's states, since-times and reasons. The evidence, messages and timeline stay
in the Pod's stored document, where they are already: stored again per claim they measured
as large as the history they derive from (bench/README.md), so the claim page reads them from
there. A Pod's document changes with every event about it, its claims' states less often, so
a row is rewritten only when they differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from collector.models import Cluster
from derived.documents import unpack
from derived.models import ClaimJudgement, PodExplanation
from domain.boundaries.judgement import BOUNDARIES, is_device_check

BATCH = 2000
# What a row holds of each boundary: model fields ``<boundary>_<key>``.
_KEYS = ("state", "since", "reason")
_STATES = tuple(f"{name}_{key}" for name in BOUNDARIES for key in _KEYS)


def claim_states(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """A Pod's explain document (stored or derived on read) as its claims' rows' fields, by claim
    UID; a claim not created yet (no UID) has no page and no row."""
    pod = doc["pod"]
    out = {}
    for claim in doc["claims"]:
        if not claim.get("uid"):
            continue
        fields = {"pod_uid": str(pod["uid"]), "pod_name": str(pod["name"]), "namespace": str(pod["namespace"])}
        for name in BOUNDARIES:
            boundary = claim["boundaries"][name]
            fields.update({f"{name}_{key}": str(boundary.get(key) or "") for key in _KEYS})
        out[str(claim["uid"])] = fields
    return out


def write_claim_rows(cluster_id: int, at: datetime, judged: Mapping[str, Mapping[str, Any]]) -> int:
    """Bring the open rows of the judged Pods (Pod UID → its new document) in line with their
    documents' claims, as of ``at``; rows written."""
    compared = ["claim_uid", *_STATES]
    heads: dict[str, dict[str, tuple[int, tuple[str, ...]]]] = {}  # Pod → claim → (pk, states)
    pods = sorted(judged)
    for start in range(0, len(pods), BATCH):
        rows = _open(cluster_id).filter(pod_uid__in=pods[start : start + BATCH])
        for pk, pod_uid, claim_uid, *states in rows.values_list("pk", "pod_uid", *compared):
            heads.setdefault(pod_uid, {})[claim_uid] = (pk, tuple(states))
    ended: list[int] = []
    new: list[ClaimJudgement] = []
    for pod_uid in pods:
        now = claim_states(judged[pod_uid])
        before = heads.get(pod_uid, {})
        ended += [pk for claim_uid, (pk, _states) in before.items() if claim_uid not in now]
        for claim_uid, fields in now.items():
            head = before.get(claim_uid)
            if head is not None and head[1] == tuple(fields[k] for k in compared[1:]):
                continue
            if head is not None:
                ended.append(head[0])
            new.append(ClaimJudgement(cluster_id=cluster_id, claim_uid=claim_uid, valid_from=at, **fields))
    for start in range(0, len(ended), BATCH):
        ClaimJudgement.objects.filter(pk__in=ended[start : start + BATCH]).update(valid_to=at)
    ClaimJudgement.objects.bulk_create(new, batch_size=BATCH)
    return len(new)


def end_claim_rows_of(cluster_id: int, at: datetime, keep: Iterable[str]) -> None:
    """End the open rows of every Pod but ``keep`` (a full derivation's live Pods), as their
    explanations end."""
    kept = set(keep)
    open_pods = _open(cluster_id).values_list("pod_uid", flat=True).distinct()
    ended = sorted(uid for uid in open_pods if uid not in kept)
    for start in range(0, len(ended), BATCH):
        _open(cluster_id).filter(pod_uid__in=ended[start : start + BATCH]).update(valid_to=at)


def _open(cluster_id: int) -> Any:
    return ClaimJudgement.objects.filter(cluster_id=cluster_id, valid_to__isnull=True)


@dataclass
class Judgement:
    """One Pod's judgement of the claim, as the claim page shows it."""

    pod_uid: str
    pod_name: str
    namespace: str
    boundaries: list[dict[str, Any]]  # per boundary: name, state, since, reason (+ message, evidence)
    timeline: list[dict[str, Any]]


def claim_judgements(cluster: Cluster, claim_uid: str, as_of: datetime) -> list[Judgement]:
    """The claim's rows valid at ``as_of``, one per Pod that uses it, each with the evidence,
    messages and timeline of the claim's part of that Pod's document (two queries)."""
    valid = Q(valid_to__isnull=True) | Q(valid_to__gt=as_of)
    rows = list(ClaimJudgement.objects.filter(valid, cluster=cluster, claim_uid=claim_uid, valid_from__lte=as_of))
    docs = PodExplanation.objects.filter(
        valid, cluster=cluster, pod_uid__in=[row.pod_uid for row in rows], valid_from__lte=as_of
    ).values_list("pod_uid", "content", "dictionary_id")
    parts = {pod: _part_of(unpack(content, d), claim_uid) for pod, content, d in docs}
    judgements = []
    for row in sorted(rows, key=lambda r: (r.pod_name, r.pod_uid)):
        part = parts.get(row.pod_uid) or {}
        boundaries = []
        for name in BOUNDARIES:
            detail = (part.get("boundaries") or {}).get(name) or {}
            states = {key: getattr(row, f"{name}_{key}") for key in _KEYS}
            boundaries.append(
                {"boundary": name, **states, "message": detail.get("message") or "", **_evidence(detail)}
            )
        judgements.append(Judgement(row.pod_uid, row.pod_name, row.namespace, boundaries, part.get("timeline") or []))
    return judgements


def _part_of(doc: Mapping[str, Any], claim_uid: str) -> Mapping[str, Any] | None:
    return next((c for c in doc["claims"] if c.get("uid") == claim_uid), None)


def _evidence(boundary: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence apart from a simulation's per-device checks (thousands at scale: the Pod's page
    lists them), and how many checks there were."""
    evidence = boundary.get("evidence") or []
    kept = [e for e in evidence if not is_device_check(e)]
    return {"evidence": kept, "device_checks": len(evidence) - len(kept)}


def rows_from(docs: Iterable[Mapping[str, Any]], claim_uid: str) -> list[dict[str, str]]:
    """What the claim's rows must say as of a time, from the explain documents valid then (derived
    on read): the rows' fields, in the rows' order."""
    found = [states[claim_uid] for doc in docs if claim_uid in (states := claim_states(doc))]
    return sorted(found, key=lambda f: (f["pod_name"], f["pod_uid"]))


def stored_rows(cluster: Cluster, claim_uid: str, as_of: datetime) -> list[dict[str, str]]:
    """The claim's rows valid at ``as_of`` as fields, in the same order as ``rows_from``."""
    fields = ["pod_uid", "pod_name", "namespace", *_STATES]
    valid = Q(valid_to__isnull=True) | Q(valid_to__gt=as_of)
    rows = ClaimJudgement.objects.filter(valid, cluster=cluster, claim_uid=claim_uid, valid_from__lte=as_of)
    return sorted(rows.values(*fields), key=lambda f: (f["pod_name"], f["pod_uid"]))
