"""Pages for "why is my Pod Pending?": search, the Pod page, the selector playground."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET

from access.scope import redactor_of, redactor_with, require_namespace, scope_for
from collector.history_reader import NoSnapshot, StoredHistory
from collector.recent_history import ReadError, current_snapshot, open_history
from dashboard import charts
from dashboard.clusters import cluster_or_404
from dashboard.continue_token import BadToken, Continuation
from dashboard.finding import FILTERS, PODS_PER_PAGE, pods_listed, search_hits
from dashboard.leak_flags import flags_for
from dashboard.selector_limits import match_devices_page
from dashboard.time_travel import pod_steps, with_as_of
from dashboard.views import render_page
from derived.reading import explain_read
from domain.allocator.cel import SelectorCompileError, SelectorLimitExceeded
from domain.boundaries.judgement import BOUNDARIES, is_device_check
from domain.cluster.timefmt import rfc3339
from domain.verdicts.explain import PodNotFound


@require_GET
def search(request: HttpRequest, cluster: str) -> HttpResponse:
    """A Pod's exact name lands on its page, as does a query only one thing has in its name; anything else
    lists what has the query in its name (Pods, claims, namespaces, nodes)."""
    c = cluster_or_404(cluster)
    query = request.GET.get("q", "").strip()
    hits = search_hits(c, scope_for(request.user, c), query)
    pods = [h for h in hits if h.kind == "Pod"]
    exact = len(pods) == 1 and pods[0].name == query.rpartition("/")[2]
    if exact or len(hits) == 1:
        return redirect(with_as_of(request, (pods[0] if exact else hits[0]).url))
    groups = [(kind, [h for h in hits if h.kind == kind]) for kind in ("Pod", "ResourceClaim", "Namespace", "Node")]
    context = {"cluster": c, "query": query, "hits": hits, "groups": [g for g in groups if g[1]]}
    return render_page(request, "dashboard/search.html", context, "hits")


@require_GET
def pods(request: HttpRequest, cluster: str) -> HttpResponse:
    """The DRA Pods of the snapshot, filtered by namespace, verdict reason, node and phase, a page at a time."""
    c = cluster_or_404(cluster)
    context: dict[str, Any] = {"cluster": c, "as_of": None}
    try:
        history = open_history(c, request.GET.get("as_of") or None)
    except ReadError as exc:
        context["empty_reason"] = str(exc)
        return render_page(request, "dashboard/pods.html", context, "pods-table")
    asked = {key: request.GET.get(key, "") for key in FILTERS}
    rows, choices = pods_listed(history, scope_for(request.user, c), asked)
    page = Paginator(rows, PODS_PER_PAGE).get_page(request.GET.get("page"))
    context.update(
        as_of=history.as_of,
        pods=page.object_list,
        page=page,
        total=page.paginator.count,
        asked=asked,
        choices=choices,
        filters_query=urlencode({k: v for k, v in asked.items() if v}),
    )
    return render_page(request, "dashboard/pods.html", context, "pods-table")


@require_GET
def pod(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    require_namespace(scope_for(request.user, c), namespace)
    as_of = request.GET.get("as_of") or None
    shown = request.GET.get("shown")
    if shown and not as_of and request.headers.get("HX-Request"):
        # The live page asks every few seconds: indexed queries answer "nothing new" (204: htmx keeps
        # what it shows) until a newer snapshot is read about now (a watched batch derived, or a checkpoint).
        try:
            if str(current_snapshot(c)[0]) == shown:
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
        "steps": _step_urls(c.name, namespace, name, pod_steps(c, namespace, name, history.as_of)),
    }
    return render_page(request, "dashboard/pod.html", context, "pod-body")


def _step_urls(cluster: str, namespace: str, name: str, steps: dict[str, datetime | None]) -> dict[str, Any]:
    """The Pod page as of each step's snapshot, with the step's time."""
    page = reverse("pod", args=[cluster, namespace, name])
    return {
        key: {"at": at, "url": f"{page}?{urlencode({'as_of': rfc3339(at)})}"} if at is not None else None
        for key, at in steps.items()
    }


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


# The devices the playground judges a page: at 5,000 nodes (40,000 devices) the whole answer took 1.7 s
# for a process's first request and rendered 40,000 rows; a page reads its own devices' rows alone.
PLAYGROUND_PAGE = 1000


@require_GET
def playground(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    expression = request.GET.get("expression", "").strip()
    class_name = request.GET.get("class", "").strip() or None
    context: dict[str, Any] = {"cluster": c, "expression": expression, "class_name": class_name or ""}
    token = request.GET.get("continue") or ""
    try:
        # A later page reads the snapshot its first page read (the token names it), as /api/match-devices.
        continuation = Continuation.decode(token, 3) if token else None
        # The cluster as of the time picked (``?as_of=``), as every other page: its devices, classes and holders.
        history = open_history(c, continuation.as_of if continuation else request.GET.get("as_of") or None)
        if continuation is not None and (continuation.cluster != c.name or continuation.as_of != history.as_of):
            raise BadToken("the next page's snapshot is no longer stored, or is another cluster's: match again")
    except (BadToken, ReadError) as exc:
        context["error"] = str(exc)
        return render_page(request, "dashboard/playground.html", context, "results")
    context["as_of"] = history.as_of
    context["classes"] = sorted(o["metadata"]["name"] for o in history.state.of_kind("DeviceClass"))
    if expression:
        try:
            after = continuation.after if continuation else None
            found, last = match_devices_page(history, expression, class_name, after, PLAYGROUND_PAGE)
            # As /api/match-devices: the holders of unavailable devices are redacted for a team member.
            context["result"] = redactor_of(request.user, history).matches(found)
        except SelectorCompileError as exc:
            context["error"] = f"The expression does not compile: {exc}"
        except SelectorLimitExceeded as exc:
            context["error"] = f"The expression was stopped: {exc}"
        except LookupError as exc:
            context["error"] = str(exc)
        else:
            context |= _playground_pages(c.name, history, expression, class_name, found, continuation, last)
    return render_page(request, "dashboard/playground.html", context, "results")


def _playground_pages(
    cluster: str,
    history: StoredHistory,
    expression: str,
    class_name: str | None,
    found: dict[str, Any],
    continuation: Continuation | None,
    last: tuple[str, str, str] | None,
) -> dict[str, Any]:
    """What the results say of paging: how many devices this page judged, and the next page's query."""
    judged = len(found["matched"]) + len(found["errors"]) + len(found["rejected"])
    asked = {"expression": expression, "class": class_name or ""}
    following = urlencode({**asked, "continue": Continuation(cluster, history.as_of, last).encode()}) if last else ""
    return {
        "judged": judged,
        "paged": continuation is not None or last is not None,
        "next_page": following,
        "first_page": urlencode(asked) if continuation is not None else "",
    }
