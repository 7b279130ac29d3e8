"""Pages: thin shells over collector.history_reader and the domain."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode

from access.scope import is_platform_admin, require_namespace, scope_for
from collector.history_reader import (
    STORED,
    StoredHistory,
    decode_stored,
    group_member_versions,
    namespaces_in_use,
    readable,
)
from collector.models import ObjectVersion, Snapshot
from collector.recent_history import ReadError, open_history
from dashboard.clusters import cluster_or_404
from dashboard.leak_flags import flags_for, flags_of
from derived.claim_rows import claim_judgements
from derived.reading import claims_page
from domain.cluster.claim_summaries import allocation_results, consumers, summarize_claim
from domain.cluster.diff import diff
from domain.cluster.gangs import is_group_consumer, member_state, min_count
from domain.reports.redaction import Redactor, Scope, referenced_namespaces

CLAIMS_PER_PAGE = 200


def render_page(request: HttpRequest, template: str, context: dict[str, Any], partial: str) -> HttpResponse:
    """The whole page, or just ``partial`` for htmx; caches must keep the two apart."""
    name = f"{template}#{partial}" if getattr(request, "htmx", False) else template
    response = render(request, name, context)
    patch_vary_headers(response, ("HX-Request",))
    return response


def claims(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    # The configured clusters, from settings: a lookup per page is one query more than the list needs.
    context: dict[str, Any] = {"cluster": c, "clusters": [s.name for s in settings.CLAIMLINE_CLUSTERS]}
    try:
        history = open_history(c, request.GET.get("as_of") or None)
    except ReadError as exc:
        context.update(claims=[], as_of=None, empty_reason=str(exc))
    else:
        namespace = request.GET.get("namespace", "")
        # A 5,000-node cluster has tens of thousands of claims: render a page of them.
        listed = claims_page(history, scope_for(request.user, c), namespace, request.GET.get("page"), CLAIMS_PER_PAGE)
        flags = flags_of(listed.leaks, scope_for(request.user, c))  # the page's claims' flags, read with it
        rows = [(claim, flags.get(claim.uid)) for claim in listed.claims]
        context.update(claims=rows, page=listed.page, as_of=history.as_of, namespaces=listed.namespaces,
                       namespace=namespace, total=listed.total, filters_query=urlencode({"namespace": namespace}))
    context["last_run"] = Snapshot.objects.filter(cluster=c).order_by("-at").first()
    return render_page(request, "dashboard/claims.html", context, "claims-table")


def claim_detail(request: HttpRequest, cluster: str, uid: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    rows = list(
        ObjectVersion.objects.filter(cluster=c, kind="ResourceClaim", uid=uid)
        .order_by("valid_from")
        .values("valid_from", "valid_to", "deleted", "content", "namespace", "shapes_checked")
    )
    if not rows:
        raise Http404("no such claim")
    scope = scope_for(request.user, c)
    require_namespace(scope, rows[0]["namespace"])
    try:
        history: StoredHistory | None = open_history(c, request.GET.get("as_of") or None)
    except ReadError:
        history = None
    flag = flags_for(history, scope, [uid]).get(uid) if history is not None else None
    versions: list[dict[str, Any]] = []
    previous = newest = current = None
    for row in rows:
        stored = (row["content"], row["shapes_checked"])
        obj, unreadable = (None, None) if row["deleted"] else decode_stored("ResourceClaim", *stored)
        if unreadable:
            # Stored before fields were checked: shown as stored, and read by no report (history_reader).
            versions.append({"at": row["valid_from"], "until": row["valid_to"], "deleted": False, "summary": None,
                             "unreadable": unreadable, "changes": [], "json": row["content"]})
            current = None
            continue
        current = obj
        versions.append(
            {
                "at": row["valid_from"],
                "until": row["valid_to"],
                "deleted": row["deleted"],
                "summary": summarize_claim(obj) if obj else None,
                "changes": diff(previous, obj) if previous is not None or obj is None else [],
                "json": orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() if obj else "",
            }
        )
        previous = obj
        newest = obj or newest
    latest = next((v["summary"] for v in reversed(versions) if v["summary"]), None)
    context = {
        "cluster": c,
        "uid": uid,
        "claim": latest,
        "flag": flag,
        # Each allocated device with its driver, for its page (the summary says "pool/device").
        "devices": [
            {key: str(r.get(key) or "") for key in ("driver", "pool", "device")}
            for r in (allocation_results(newest) if newest else ())
        ],
        "consumers": _consumers(c, current) if current is not None else [],
        "versions": list(reversed(versions)),
        "judgements": [
            {**j, "pod_url": _judged_pod_url(c.name, j)}
            for j in (_judgements(scope, c, uid, history.as_of) if history is not None else ())
        ],
    }
    return render_page(request, "dashboard/claim.html", context, "versions")


def _consumers(cluster: Any, claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's ``reservedFor`` as the page lists it: a Pod links to its page; a PodGroup shows whether it
    still exists and its members (a group-shared claim stays in use while one of them is active)."""
    namespace = str((claim.get("metadata") or {}).get("namespace") or "")
    out = []
    for ref in consumers(claim):
        name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
        if not is_group_consumer(ref):
            url = reverse("pod", args=[cluster.name, namespace, name]) + f"?{urlencode({'uid': uid})}"
            out.append({"kind": "Pod" if ref.get("resource", "pods") == "pods" else ref.get("resource"),
                        "name": name, "uid": uid, "url": url})
            continue
        stored = ObjectVersion.objects.filter(
            cluster=cluster, kind="PodGroup", uid=uid, valid_to__isnull=True, deleted=False
        ).values_list(*STORED).first()
        group = readable("PodGroup", *stored) if stored is not None else None
        members = []
        for pod_uid, at, content, checked in group_member_versions(cluster.pk, namespace, name).values_list(*STORED):
            pod = readable("Pod", pod_uid, at, content, checked)
            if pod is None:
                continue  # a version the door did not check and that misfits: read by no page (history_reader)
            state, detail = member_state(pod)
            pod_name = pod["metadata"]["name"]
            members.append({"name": pod_name, "state": state, "detail": detail,
                            "url": reverse("pod", args=[cluster.name, namespace, pod_name])})
        out.append({
            "kind": "PodGroup",
            "name": name,
            "uid": uid,
            "exists": stored is not None,
            "minCount": min_count(group) if group is not None else None,
            "members": sorted(members, key=lambda m: m["name"]),
            "active": sum(1 for m in members if m["state"] not in ("terminal", "deleting")),
        })
    return out


def _judgements(scope: Scope, cluster: Any, uid: str, as_of: datetime) -> list[dict[str, Any]]:
    """The claim's boundary states and timeline as each Pod using it was judged as of the page's snapshot
    (derived rows), redacted for a team member: a message may name another team's claim holding the devices."""
    judged = [asdict(j) for j in claim_judgements(cluster, uid, as_of)]
    if scope.admin or not judged:
        return judged
    named = namespaces_in_use(cluster, as_of, among=referenced_namespaces(judged))
    return list(Redactor(scope, named).document(judged))


def _judged_pod_url(cluster: str, judgement: dict[str, Any]) -> str:
    """The judged incarnation's page, not the newest one's: it lists the device checks the claim page only counts."""
    pod_page = reverse("pod", args=[cluster, judgement["namespace"], judgement["pod_name"]])
    return f"{pod_page}?{urlencode({'uid': judgement['pod_uid']})}"


def snapshots(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    runs = Snapshot.objects.filter(cluster=c).select_related("cluster").order_by("-at", "-pk")[:200]
    context = {"cluster": c, "runs": runs, "show_errors": is_platform_admin(request.user)}
    return render_page(request, "dashboard/snapshots.html", context, "runs")


@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")
