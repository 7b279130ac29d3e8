"""Each judged claim's four boundary states and its timeline as rows (``ClaimBoundary``,
``ClaimTransition``), written with the Pod explanations they come from, and read by the claim page.

A claim's part of a Pod's document (``verdicts.explain_incarnation``) is the one definition:
the rows are that part cut into its boundaries and its timeline entries. They follow the
document's validity but change less often: a Pod's document changes with every event about
it, its claim's part only when a boundary or a transition of that claim does, so the rows are
compared by the hash of the claim's part and rewritten only when it differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Q

from collector.models import Cluster
from dashboard.domain.boundaries import BOUNDARIES
from derived.models import ClaimBoundary, ClaimTransition

BATCH = 2000


@dataclass(frozen=True)
class ClaimPart:
    """What the rows hold of one claim in one Pod's document, in the rows' own terms."""

    claim_uid: str
    digest: str
    boundaries: list[dict[str, Any]]  # ClaimBoundary fields, in BOUNDARIES order
    transitions: list[dict[str, Any]]  # ClaimTransition fields, in the timeline's order


def claim_parts(doc: Mapping[str, Any]) -> list[ClaimPart]:
    """The claims of an explain document (stored or derived on read) as rows' fields; a claim
    not created yet (no UID) has no page and no rows."""
    parts = []
    pod = doc["pod"]
    for claim in doc["claims"]:
        uid = claim.get("uid")
        if not uid:
            continue
        boundaries = [_boundary(str(uid), pod, name, claim["boundaries"][name]) for name in BOUNDARIES]
        transitions = [
            {
                "claim_uid": str(uid),
                "pod_uid": str(pod["uid"]),
                "position": i,
                "at": entry.get("at") or "",
                "boundary": entry.get("boundary") or "",
                "what": str(entry.get("what") or ""),
                "source": str(entry.get("source") or ""),
                "about_claim": entry.get("claim") is not None,
            }
            for i, entry in enumerate(claim.get("timeline") or ())
        ]
        digest = hashlib.blake2b(orjson.dumps([boundaries, transitions]), digest_size=16).hexdigest()
        parts.append(ClaimPart(str(uid), digest, boundaries, transitions))
    return parts


def _boundary(claim_uid: str, pod: Mapping[str, Any], name: str, boundary: Mapping[str, Any]) -> dict[str, Any]:
    evidence = boundary.get("evidence") or []
    # A simulation's per-device checks: thousands on a big cluster, listed by the Pod's page.
    checks = [e for e in evidence if e.get("kind") == "DeviceMatch" and "device" in e]
    kept = [e for e in evidence if not (e.get("kind") == "DeviceMatch" and "device" in e)]
    return {
        "claim_uid": claim_uid,
        "pod_uid": str(pod["uid"]),
        "pod_name": str(pod["name"]),
        "namespace": str(pod["namespace"]),
        "boundary": name,
        "state": str(boundary.get("state") or ""),
        "reason": str(boundary.get("reason") or ""),
        "since": boundary.get("since") or "",
        "message": str(boundary.get("message") or ""),
        "evidence": orjson.dumps(kept).decode(),
        "device_checks": len(checks),
    }


def write_claim_rows(cluster_id: int, at: datetime, judged: Mapping[str, Mapping[str, Any]]) -> int:
    """Bring the open rows of the judged Pods (Pod UID → its new document) in line with their
    documents' claims, as of ``at``; rows written."""
    heads: dict[str, dict[str, str]] = {}  # Pod UID → claim UID → the hash of its open rows
    pods = sorted(judged)
    for start in range(0, len(pods), BATCH):
        rows = _open(ClaimBoundary, cluster_id).filter(pod_uid__in=pods[start : start + BATCH])
        for pod_uid, claim_uid, digest in rows.values_list("pod_uid", "claim_uid", "content_hash").distinct():
            heads.setdefault(pod_uid, {})[claim_uid] = digest
    ended: list[tuple[str, str]] = []
    boundaries: list[ClaimBoundary] = []
    transitions: list[ClaimTransition] = []
    for pod_uid in pods:
        parts = {part.claim_uid: part for part in claim_parts(judged[pod_uid])}
        open_rows = heads.get(pod_uid, {})
        ended += [(pod_uid, claim_uid) for claim_uid in open_rows if claim_uid not in parts]
        for claim_uid, part in parts.items():
            known = open_rows.get(claim_uid)
            if known == part.digest:
                continue
            if known is not None:
                ended.append((pod_uid, claim_uid))
            common = {"cluster_id": cluster_id, "valid_from": at}
            boundaries += [ClaimBoundary(**common, **fields, content_hash=part.digest) for fields in part.boundaries]
            transitions += [ClaimTransition(**common, **fields) for fields in part.transitions]
    _end(cluster_id, ended, at)
    ClaimBoundary.objects.bulk_create(boundaries, batch_size=BATCH)
    ClaimTransition.objects.bulk_create(transitions, batch_size=BATCH)
    return len(boundaries) + len(transitions)


def end_claim_rows_of(cluster_id: int, at: datetime, keep: Iterable[str]) -> None:
    """End the open rows of every Pod but ``keep`` (a full derivation's live Pods), as their
    explanations end."""
    kept = set(keep)
    for model in (ClaimBoundary, ClaimTransition):
        open_pods = _open(model, cluster_id).values_list("pod_uid", flat=True).distinct()
        ordered = sorted(uid for uid in open_pods if uid not in kept)
        for start in range(0, len(ordered), BATCH):
            _open(model, cluster_id).filter(pod_uid__in=ordered[start : start + BATCH]).update(valid_to=at)


def _end(cluster_id: int, keys: list[tuple[str, str]], at: datetime) -> None:
    by_pod: dict[str, list[str]] = {}
    for pod_uid, claim_uid in keys:
        by_pod.setdefault(pod_uid, []).append(claim_uid)
    for pod_uid, claims in by_pod.items():
        for model in (ClaimBoundary, ClaimTransition):
            _open(model, cluster_id).filter(pod_uid=pod_uid, claim_uid__in=claims).update(valid_to=at)


def _open(model: type[ClaimBoundary] | type[ClaimTransition], cluster_id: int) -> Any:
    return model.objects.filter(cluster_id=cluster_id, valid_to__isnull=True)


@dataclass
class ClaimJudgement:
    """One Pod's judgement of the claim, as the claim page shows it."""

    pod_uid: str
    pod_name: str
    namespace: str
    boundaries: list[dict[str, Any]]
    timeline: list[dict[str, Any]]


def claim_judgements(cluster: Cluster, claim_uid: str, as_of: datetime) -> list[ClaimJudgement]:
    """The claim's rows valid at ``as_of``, one judgement per Pod that uses it (two queries)."""
    valid = Q(valid_to__isnull=True) | Q(valid_to__gt=as_of)
    rows = ClaimBoundary.objects.filter(valid, cluster=cluster, claim_uid=claim_uid, valid_from__lte=as_of)
    judgements: dict[str, ClaimJudgement] = {}
    order = {name: i for i, name in enumerate(BOUNDARIES)}
    for row in sorted(rows, key=lambda r: (r.pod_name, r.pod_uid, order.get(r.boundary, len(order)))):
        judgement = judgements.setdefault(row.pod_uid, ClaimJudgement(row.pod_uid, row.pod_name, row.namespace, [], []))
        judgement.boundaries.append(
            {
                "boundary": row.boundary,
                "state": row.state,
                "reason": row.reason,
                "since": row.since,
                "message": row.message,
                "evidence": orjson.loads(row.evidence),
                "device_checks": row.device_checks,
            }
        )
    entries = ClaimTransition.objects.filter(valid, cluster=cluster, claim_uid=claim_uid, valid_from__lte=as_of)
    for entry in entries.order_by("pod_uid", "position"):
        if entry.pod_uid in judgements:
            judgements[entry.pod_uid].timeline.append(
                {"at": entry.at, "boundary": entry.boundary, "what": entry.what, "source": entry.source,
                 "about_claim": entry.about_claim}
            )
    return list(judgements.values())


def judgements_from(docs: Iterable[Mapping[str, Any]], claim_uid: str) -> list[ClaimJudgement]:
    """``claim_judgements`` from explain documents instead of rows: what the rows must equal."""
    judgements = []
    for doc in docs:
        for part in claim_parts(doc):
            if part.claim_uid != claim_uid:
                continue
            first = part.boundaries[0]
            judgements.append(
                ClaimJudgement(
                    first["pod_uid"],
                    first["pod_name"],
                    first["namespace"],
                    [
                        {k: (orjson.loads(v) if k == "evidence" else v) for k, v in b.items()
                         if k not in ("claim_uid", "pod_uid", "pod_name", "namespace")}
                        for b in part.boundaries
                    ],
                    [
                        {k: v for k, v in t.items() if k not in ("claim_uid", "pod_uid", "position")}
                        for t in part.transitions
                    ],
                )
            )
    return sorted(judgements, key=lambda j: (j.pod_name, j.pod_uid))
