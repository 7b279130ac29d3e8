"""Finding a Pod: the search behind the header's box (any part of a Pod, claim, node or namespace name, in
the user's scope) and the Pods page's rows (DRA Pods with their verdict, node and phase, filtered). The views
in ``diagnosis_views`` call these and render what they return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q
from django.urls import reverse
from django.utils.http import urlencode

from collector.history_reader import StoredHistory
from collector.models import Cluster, ObjectVersion
from derived.reading import pod_listings, waiting_verdicts
from domain.boundaries.judgement import is_terminal
from domain.cluster.pod_claims import pods_with_claims
from domain.cluster.state import meta, ns_name, uid_of
from domain.reports.redaction import Scope
from domain.verdicts.explain import verdict_reader

# At most this many hits of each kind: a part as short as "a" matches most of a cluster.
SEARCH_LIMIT = 200
PODS_PER_PAGE = 100


@dataclass(frozen=True)
class Hit:
    kind: str  # Pod | ResourceClaim | Node | Namespace
    namespace: str
    name: str
    url: str


def search_hits(cluster: Cluster, scope: Scope, query: str) -> list[Hit]:
    """What ``query`` names: a Pod or claim by its exact name (``namespace/name`` or ``name``), else every
    Pod, claim, node and namespace with the query in its name, over the cluster's history. A team member
    gets only the Pods, claims and namespaces of their namespaces (nodes are cluster-wide, as the inventory)."""
    namespace, slash, name = query.rpartition("/") if "/" in query else ("", "", query)
    if not name:
        return []
    asked = namespace if slash else None
    exact = _objects(cluster, scope, asked, name, exact=True)
    if exact:
        return exact
    hits = _objects(cluster, scope, asked, name, exact=False)
    if asked is None:
        hits += _namespaces(cluster, scope, name) + _nodes(cluster, name)
    return hits


def _objects(cluster: Cluster, scope: Scope, namespace: str | None, name: str, *, exact: bool) -> list[Hit]:
    rows = ObjectVersion.objects.filter(cluster=cluster, kind__in=["Pod", "ResourceClaim"])
    if exact:
        rows = rows.filter(name=name) if namespace is None else rows.filter(name=name, namespace=namespace)
    elif namespace is None:
        rows = rows.filter(Q(name__icontains=name) | Q(namespace__icontains=name))
    else:
        rows = rows.filter(name__icontains=name, namespace__icontains=namespace)
    rows = _in_scope(rows, scope)
    # A claim's page is its UID's: the newest incarnation of the name, read in the same query.
    found = rows.order_by("kind", "namespace", "name", "-valid_from").values_list("kind", "namespace", "name", "uid")
    newest: dict[tuple[str, str, str], str] = {}
    for kind, ns, n, uid in found.iterator(2000):
        newest.setdefault((kind, ns, n), uid)
        if len(newest) > 2 * SEARCH_LIMIT:
            break
    hits = []
    for kind in ("Pod", "ResourceClaim"):
        named = [(ns, n, uid) for (k, ns, n), uid in newest.items() if k == kind and scope.sees(ns)]
        hits += [Hit(kind, ns, n, _url_for(cluster.name, kind, ns, n, uid)) for ns, n, uid in named[:SEARCH_LIMIT]]
    return hits


def _namespaces(cluster: Cluster, scope: Scope, part: str) -> list[Hit]:
    rows = _in_scope(ObjectVersion.objects.filter(cluster=cluster, kind="Pod", namespace__icontains=part), scope)
    names = rows.order_by("namespace").values_list("namespace", flat=True).distinct()[:SEARCH_LIMIT]
    pods = reverse("pods", args=[cluster.name])
    return [Hit("Namespace", "", ns, f"{pods}?{urlencode({'namespace': ns})}") for ns in names if scope.sees(ns)]


def _nodes(cluster: Cluster, part: str) -> list[Hit]:
    rows = ObjectVersion.objects.filter(cluster=cluster, kind="Node", name__icontains=part)
    names = rows.order_by("name").values_list("name", flat=True).distinct()[:SEARCH_LIMIT]
    inventory = reverse("inventory", args=[cluster.name])
    return [Hit("Node", "", n, f"{inventory}?{urlencode({'node': n})}") for n in names]


def _in_scope(rows: Any, scope: Scope) -> Any:
    return rows if scope.admin else rows.filter(namespace__in=sorted(scope.namespaces))


def _url_for(cluster: str, kind: str, namespace: str, name: str, uid: str) -> str:
    if kind == "Pod":
        return reverse("pod", args=[cluster, namespace, name])
    return reverse("claim", args=[cluster, uid])


# --- the Pods page ---------------------------------------------------------------------------------------

FILTERS = ("namespace", "reason", "node", "phase")


_COLUMNS = ("namespace", "name", "reason", "boundary", "node", "phase", "created")


def pods_listed(
    history: StoredHistory, scope: Scope, asked: Mapping[str, str]
) -> tuple[Sequence[dict[str, str]] | Any, dict[str, list[str]]]:
    """The Pods page's rows matching ``asked`` and each filter's choices (``filter_rows``): from the derived
    layer's columns when it covers the snapshot, a query the paginator pages in SQL (no Pod decoded, none
    judged); else from the snapshot's Pods (``pod_rows``)."""
    listed = pod_listings(history, scope)
    if listed is None:
        return filter_rows(pod_rows(history, scope), asked)
    seen = listed.order_by().values_list(*FILTERS).distinct()
    choices: dict[str, set[str]] = {key: set() for key in FILTERS}
    for values in seen.iterator(2000):
        for key, value in zip(FILTERS, values, strict=True):
            if value:
                choices[key].add(value)
    kept = listed.filter(**{key: asked[key] for key in FILTERS if asked.get(key)})
    return kept.values(*_COLUMNS, uid=F("pod_uid")), {key: sorted(values) for key, values in choices.items()}


def pod_rows(history: StoredHistory, scope: Scope) -> list[dict[str, str]]:
    """Every live DRA Pod of the snapshot the scope sees, in namespace and name order: its verdict's reason
    (the stored verdicts of waiting Pods when the layer covers the snapshot, so the others are ``ok``;
    judged on read otherwise), node and phase. A finished Pod is not judged: its reason is empty."""
    return [row for row in history.derived("pod-rows", lambda: _all_pod_rows(history)) if scope.sees(row["namespace"])]


def _all_pod_rows(history: StoredHistory) -> list[dict[str, str]]:
    verdict_of = verdict_reader(history, waiting_verdicts(history))
    rows = []
    for pod in pods_with_claims(history.state):
        namespace, name = ns_name(pod)
        verdict: Mapping[str, Any] = {} if is_terminal(pod) else verdict_of(pod)
        rows.append(
            {
                "namespace": namespace,
                "name": name,
                "uid": uid_of(pod),
                "reason": str(verdict.get("reason") or ""),
                "boundary": str(verdict.get("boundary") or ""),
                "node": str((pod.get("spec") or {}).get("nodeName") or ""),
                "phase": str((pod.get("status") or {}).get("phase") or ""),
                "created": str(meta(pod).get("creationTimestamp") or ""),
            }
        )
    rows.sort(key=lambda r: (r["namespace"], r["name"]))
    return rows


def filter_rows(
    rows: list[dict[str, str]], asked: Mapping[str, str]
) -> tuple[list[dict[str, str]], dict[str, list[str]]]:
    """The rows matching every filter ``asked`` names (exact values), and each filter's choices: the values
    among all the rows the user sees."""
    choices = {key: sorted({row[key] for row in rows if row[key]}) for key in FILTERS}
    kept = [row for row in rows if all(not asked.get(key) or row[key] == asked[key] for key in FILTERS)]
    return kept, choices
