"""/api/: the CLI's JSON documents over HTTP, same shapes (DESIGN.md)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from access.scope import is_platform_admin, redactor_of, redactor_with, scope_for
from collector.history_reader import StoredHistory, collection_health
from collector.models import Snapshot
from collector.recent_history import ReadError, open_history
from collector.snapshot_runs import snapshots_document
from dashboard.claim_entries import claim_entries, every_claim_response
from dashboard.continue_token import Continuation
from dashboard.selector_limits import match_devices_page, match_devices_typed
from derived.reading import claim_key, claims_after, explain_read, metrics_read
from derived.reports import audit_read, leaks_read
from derived.thresholds import leak_thresholds
from domain.allocator.cel import SelectorCompileError, SelectorLimitExceeded
from domain.cluster.timefmt import rfc3339
from domain.reports.metrics import Served
from domain.verdicts.explain import PodNotFound
from notify.detection import absolute


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def with_history(view: Callable[[HttpRequest, StoredHistory], Any]) -> Callable[[HttpRequest], HttpResponse]:
    """Opens ``?cluster=`` as of ``?as_of=``; a missing cluster or snapshot is a 404 naming it."""

    @require_GET
    @wraps(view)
    def wrapper(request: HttpRequest) -> HttpResponse:
        try:
            history = open_history(request.GET.get("cluster"), request.GET.get("as_of"))
        except ReadError as exc:
            return _error(404, str(exc))
        result = view(request, history)
        return result if isinstance(result, HttpResponse) else JsonResponse(result)

    return wrapper


@require_GET
def api_snapshots(request: HttpRequest) -> JsonResponse:
    runs = Snapshot.objects.select_related("cluster").order_by("-at", "-pk")
    if request.GET.get("cluster"):
        runs = runs.filter(cluster__name=request.GET["cluster"])
    doc = snapshots_document(runs[:500])
    if not is_platform_admin(request.user):
        # Run errors name objects of every namespace.
        for entry in doc["snapshots"]:
            entry["error"] = "(hidden)" if entry["error"] else ""
    return JsonResponse(doc)


# ``/api/claims?limit=N`` pages the list; the ``continue`` token of a page asks for the next one (of the
# same snapshot) and keeps that limit only if it is passed again, else takes this many.
CLAIMS_DEFAULT_LIMIT = 500
CLAIMS_MAX_LIMIT = 5000  # a larger limit is served as this many (follow ``continue`` for the rest)
# ``/api/match-devices?limit=N`` alike, a page of N devices (every device judged, matched or not).
MATCH_DEFAULT_LIMIT = 500


@require_GET
def api_claims(request: HttpRequest) -> HttpResponse:
    """Every claim the user sees (no ``limit``: the whole list, as before paging), or a page of them in
    namespace, name, UID order with the ``continue`` token of the next page ("" after the last)."""
    opened = _paged(request, 3, CLAIMS_DEFAULT_LIMIT)
    if isinstance(opened, HttpResponse):
        return opened
    history, limit, after = opened
    scope = scope_for(request.user, history.cluster)
    if limit is None:
        return every_claim_response(history, scope)
    page = claims_after(history, scope, after, limit + 1)
    more = len(page) > limit
    del page[limit:]
    following = Continuation(history.cluster.name, history.as_of, claim_key(page[-1])).encode() if more else ""
    return JsonResponse(
        {"as_of": rfc3339(history.as_of), "claims": claim_entries(history, page), "continue": following}
    )


def _paged(
    request: HttpRequest, key_length: int, default_limit: int
) -> tuple[StoredHistory, int | None, tuple[str, ...] | None] | HttpResponse:
    """The history a paged list reads (``?cluster=`` as of ``?as_of=``, or the snapshot its ``continue``
    token names), the page's ``limit`` (None: no paging asked) and the key the page starts after; or the
    error response naming what was wrong (410 when the token's snapshot is no longer stored)."""
    cluster, as_of, token = request.GET.get("cluster"), request.GET.get("as_of"), request.GET.get("continue")
    try:
        limit = _limit(request.GET.get("limit"))
        continuation = Continuation.decode(token, key_length) if token else None
    except ValueError as exc:
        return _error(400, str(exc))
    if continuation is not None:
        if as_of:
            return _error(400, "pass as_of or continue, not both: a continued list keeps its snapshot")
        if cluster and cluster != continuation.cluster:
            return _error(400, f"the continue token continues the list of cluster {continuation.cluster!r}")
        cluster, limit = continuation.cluster, limit or default_limit
    try:
        history = open_history(cluster, continuation.as_of if continuation else as_of)
    except ReadError as exc:
        return _error(410 if continuation else 404, str(exc))
    if continuation is not None and history.as_of != continuation.as_of:
        return _error(410, "the snapshot this list was read as of is no longer stored: list again")
    return history, limit, continuation.after if continuation else None


def _limit(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise ValueError(f"limit is a whole number from 1, not {value!r}")
    return min(int(value), CLAIMS_MAX_LIMIT)


@with_history
def api_explain(request: HttpRequest, history: StoredHistory) -> Any:
    namespace, _, name = request.GET.get("pod", "").partition("/")
    if not namespace or not name:
        return _error(400, "pass pod=NAMESPACE/POD")
    if not scope_for(request.user, history.cluster).sees(namespace):
        return _error(404, f"no Pod {namespace}/{name}")
    try:
        doc, namespaces = explain_read(history, namespace, name, pod_uid=request.GET.get("uid") or None)
    except PodNotFound as exc:
        return _error(404, str(exc))
    return redactor_with(request.user, history.cluster, namespaces).document(doc)


@require_GET
def api_match_devices(request: HttpRequest) -> HttpResponse:
    """Which devices ``expression`` matches: every device at once (no ``limit``), or a page of ``limit``
    devices in driver, pool, name order with the ``continue`` token of the next ("" after the last). A
    page's ``matched``, ``errors``, ``rejected`` and ``why_not`` are its devices'; ``total`` counts all."""
    expression = request.GET.get("expression", "")
    if not expression.strip():
        return _error(400, "pass expression=CEL")
    opened = _paged(request, 3, MATCH_DEFAULT_LIMIT)
    if isinstance(opened, HttpResponse):
        return opened
    history, limit, after = opened
    class_name = request.GET.get("class") or None
    try:
        if limit is None:
            found = match_devices_typed(history, expression, class_name)
        else:
            found, last = match_devices_page(history, expression, class_name, after, limit)
            following = Continuation(history.cluster.name, history.as_of, last).encode() if last else ""
            found = {"as_of": rfc3339(history.as_of), **found, "continue": following}
    except SelectorCompileError as exc:
        return _error(400, f"the expression does not compile: {exc}")
    except SelectorLimitExceeded as exc:
        return _error(422, f"the expression was stopped: {exc}")
    except LookupError as exc:
        return _error(404, str(exc))
    # Devices other teams' claims hold are unavailable, but whose they are is not said.
    return _large_json(redactor_of(request.user, history).matches(found))


def _large_json(doc: dict[str, Any]) -> HttpResponse:
    """``JsonResponse`` for an answer of thousands of entries (match-devices over every device: 6.5 MB at
    5,000 nodes), encoded by orjson: the standard library's encoder took ~100 ms of such a request."""
    return HttpResponse(orjson.dumps(doc), content_type="application/json")


@with_history
def api_leaks(request: HttpRequest, history: StoredHistory) -> Any:
    return redactor_of(request.user, history).leaks(leaks_read(history, leak_thresholds()))


@with_history
def api_audit(request: HttpRequest, history: StoredHistory) -> Any:
    return redactor_of(request.user, history).audit(audit_read(history))


def _may_scrape(request: HttpRequest) -> bool:
    token = settings.CLAIMLINE_METRICS_TOKEN
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if token and sent and hmac.compare_digest(sent.encode(), token.encode()):
        return True
    return is_platform_admin(request.user)


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus scrapes with CLAIMLINE_METRICS_TOKEN; a signed-in platform admin may look too."""
    if not _may_scrape(request):
        return HttpResponse("metrics need a bearer token or a platform admin\n", status=401, content_type="text/plain")
    try:
        history = open_history(request.GET.get("cluster"), None)
    except ReadError as exc:
        return HttpResponse(f"# {exc}\n", status=404, content_type="text/plain")
    served = Served(
        history.as_of,
        now=datetime.now(UTC),
        collection=collection_health(history.cluster, history.as_of),
        dashboard_url=absolute(reverse("overview", kwargs={"cluster": history.cluster.name})),
    )
    body = metrics_read(history, leak_thresholds(), served)
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
