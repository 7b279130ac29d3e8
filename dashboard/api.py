"""/api/: the CLI's JSON documents over HTTP, same shapes (DESIGN.md)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from dashboard.domain.audit import audit
from dashboard.domain.cel import SelectorCompileError
from dashboard.domain.leaks import find_leaks
from dashboard.domain.matching import match_devices
from dashboard.domain.metrics import render_metrics
from dashboard.domain.verdicts import PodNotFound, explain
from dashboard.history import StoredHistory
from dashboard.reading import ReadError, leak_thresholds, open_history


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


@with_history
def api_explain(request: HttpRequest, history: StoredHistory) -> Any:
    namespace, _, name = request.GET.get("pod", "").partition("/")
    if not namespace or not name:
        return _error(400, "pass pod=NAMESPACE/POD")
    try:
        return explain(history, namespace, name, pod_uid=request.GET.get("uid") or None)
    except PodNotFound as exc:
        return _error(404, str(exc))


@with_history
def api_match_devices(request: HttpRequest, history: StoredHistory) -> Any:
    expression = request.GET.get("expression", "")
    if not expression.strip():
        return _error(400, "pass expression=CEL")
    try:
        return match_devices(history.state, expression, request.GET.get("class") or None)
    except SelectorCompileError as exc:
        return _error(400, f"the expression does not compile: {exc}")
    except LookupError as exc:
        return _error(404, str(exc))


@with_history
def api_leaks(request: HttpRequest, history: StoredHistory) -> Any:
    return find_leaks(history, leak_thresholds())


@with_history
def api_audit(request: HttpRequest, history: StoredHistory) -> Any:
    return audit(history)


@with_history
def metrics(request: HttpRequest, history: StoredHistory) -> Any:
    body = render_metrics(history, leak_thresholds())
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
