"""Pages for "why is my Pod Pending?": search, the Pod page, the selector playground."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET

from access.scope import redactor_of, redactor_with, require_namespace, scope_for
from collector.history_reader import NoSnapshot, latest_snapshot
from collector.models import ObjectVersion
from collector.recent_history import ReadError, open_history
from dashboard import charts
from dashboard.clusters import cluster_or_404
from dashboard.leak_flags import flags_for
from dashboard.selector_limits import match_devices_typed
from dashboard.views import render_page
from derived.reading import explain_read
from domain.allocator.cel import SelectorCompileError, SelectorLimitExceeded
from domain.boundaries.judgement import BOUNDARIES, is_device_check
from domain.verdicts.explain import PodNotFound


@require_GET
def search(request: HttpRequest, cluster: str) -> HttpResponse:
    """A Pod or claim name, namespace optional, lands on the Pod's page."""
    c = cluster_or_404(cluster)
    query = request.GET.get("q", "").strip()
    namespace, slash, name = query.rpartition("/") if "/" in query else ("", "", query)
    hits: list[dict[str, Any]] = []
    scope = scope_for(request.user, c)
    if name:
        hits = _hits(c, scope, namespace if slash else None, name, exact=True)
        if not hits:  # any part of a Pod, claim or namespace name, in scope
            hits = _hits(c, scope, namespace if slash else None, name, exact=False)
    pods = [h for h in hits if h["kind"] == "Pod"]
    if len(pods) == 1:
        return redirect(pods[0]["url"])
    if not pods and len(hits) == 1:
        return redirect(hits[0]["url"])
    return render_page(request, "dashboard/search.html", {"cluster": c, "query": query, "hits": hits}, "hits")


SEARCH_LIMIT = 200


def _hits(c: Any, scope: Any, namespace: str | None, name: str, *, exact: bool) -> list[dict[str, Any]]:
    rows = ObjectVersion.objects.filter(cluster=c, kind__in=["Pod", "ResourceClaim"])
    if exact:
        rows = rows.filter(name=name)
    elif namespace is None:
        rows = rows.filter(Q(name__icontains=name) | Q(namespace__icontains=name))
    else:
        rows = rows.filter(name__icontains=name, namespace__icontains=namespace)
    if exact and namespace is not None:
        rows = rows.filter(namespace=namespace)
    if not scope.admin:
        rows = rows.filter(namespace__in=sorted(scope.namespaces))
    found = rows.order_by("kind", "namespace", "name").values_list("kind", "namespace", "name").distinct()
    return [
        {"kind": kind, "namespace": ns, "name": n, "url": _url_for(c.name, kind, ns, n)}
        for kind, ns, n in found[:SEARCH_LIMIT]
        if scope.sees(ns)
    ]


def _url_for(cluster: str, kind: str, namespace: str, name: str) -> str:
    if kind == "Pod":
        return reverse("pod", args=[cluster, namespace, name])
    uid = (
        ObjectVersion.objects.filter(cluster__name=cluster, kind=kind, namespace=namespace, name=name)
        .order_by("-valid_from")
        .values_list("uid", flat=True)
        .first()
    )
    return reverse("claim", args=[cluster, uid])


@require_GET
def pod(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    require_namespace(scope_for(request.user, c), namespace)
    as_of = request.GET.get("as_of") or None
    shown = request.GET.get("shown")
    if shown and not as_of and request.headers.get("HX-Request"):
        # The live page asks every few seconds: one indexed query answers "nothing new" (204: htmx keeps
        # what it shows) until a newer snapshot is stored (a watched batch, or a checkpoint).
        try:
            if str(latest_snapshot(c)[0]) == shown:
                return HttpResponse(status=204)
        except NoSnapshot:
            pass
    try:
        history = open_history(c.name, as_of)
        doc, namespaces = explain_read(history, namespace, name, pod_uid=request.GET.get("uid") or None)
    except (ReadError, PodNotFound) as exc:
        raise Http404(str(exc)) from None
    doc = redactor_with(request.user, c, namespaces).document(doc)
    flags = flags_for(history, scope_for(request.user, c), [str(x.get("uid") or "") for x in doc["claims"]])
    context = {
        "cluster": c,
        "doc": doc,
        "boundaries": BOUNDARIES,
        "claims": [
            {
                **claim,
                "ordered": _boundaries_for_page(claim),
                "chart_id": f"timeline-{i}",
                "chart": charts.claim_timeline(claim.get("timeline", [])),
                "flag": flags.get(str(claim.get("uid") or "")),
            }
            for i, claim in enumerate(doc["claims"])
        ],
        "flags": list(flags.values()),
        "as_of": history.as_of,
        "selected_uid": doc["pod"]["uid"],
        # Live unless a past time was asked for: asks every few seconds while watching, what it shows
        # being the newest snapshot's.
        "live_url": None if as_of else _live_url(request, c.name, namespace, name, history.snapshot_pk),
        "live_seconds": 3 if settings.CLAIMLINE_COLLECT_MODE == "watch" else 15,
    }
    return render_page(request, "dashboard/pod.html", context, "pod-body")


def _live_url(request: HttpRequest, cluster: str, namespace: str, name: str, snapshot_pk: int) -> str:
    query = {"shown": str(snapshot_pk)}
    if request.GET.get("uid"):
        query["uid"] = request.GET["uid"]
    return f"{reverse('pod', args=[cluster, namespace, name])}?{urlencode(query)}"


def _boundaries_for_page(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """Each boundary with its per-device checks apart from the rest of its evidence: they can be thousands."""
    ordered = []
    for name in BOUNDARIES:
        boundary = claim["boundaries"][name]
        checks = [{**e, "detail": _check_detail(e)} for e in boundary["evidence"] if is_device_check(e)]
        others = [e for e in boundary["evidence"] if not is_device_check(e)]
        ordered.append({**boundary, "boundary": name, "evidence": others, "device_checks": checks})
    return ordered


def _check_detail(check: dict[str, Any]) -> str:
    """What a device check's row says beside its outcome: the error, the claim holding the device (as
    redacted for the reader), what its counters lack, its taints, or the selector that was false."""
    taints = ", ".join(str(t) for t in check.get("taints") or ())
    found = check.get("error") or check.get("holder") or check.get("unavailable") or taints or check.get("selector")
    return str(found or "")


@require_GET
def playground(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    expression = request.GET.get("expression", "").strip()
    class_name = request.GET.get("class", "").strip() or None
    context: dict[str, Any] = {"cluster": c, "expression": expression, "class_name": class_name or ""}
    try:
        history = open_history(c.name, None)
    except ReadError as exc:
        context["error"] = str(exc)
        return render_page(request, "dashboard/playground.html", context, "results")
    context["classes"] = sorted(o["metadata"]["name"] for o in history.state.of_kind("DeviceClass"))
    if expression:
        try:
            found = match_devices_typed(history.state, expression, class_name)
            # As /api/match-devices: the holders of unavailable devices are redacted for a team member.
            context["result"] = redactor_of(request.user, history).matches(found)
        except SelectorCompileError as exc:
            context["error"] = f"The expression does not compile: {exc}"
        except SelectorLimitExceeded as exc:
            context["error"] = f"The expression was stopped: {exc}"
        except LookupError as exc:
            context["error"] = str(exc)
    return render_page(request, "dashboard/playground.html", context, "results")
