"""Sign-in for every page and API, an optional trusted-proxy sign-in, the Content-Security-Policy, 400s and 404s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware, RemoteUserMiddleware
from django.contrib.auth.models import Group
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from access.scope import is_platform_admin
from collector.models import Cluster


class SignInRequiredMiddleware(LoginRequiredMiddleware):
    """Anonymous requests: pages redirect to sign-in, the API answers 401 (a script cannot follow a login form)."""

    def handle_no_permission(  # type: ignore[override]
        self, request: HttpRequest, view_func: Callable[..., Any]
    ) -> HttpResponse:
        if request.path.startswith("/api/"):
            return JsonResponse({"error": "sign in required"}, status=401)
        return super().handle_no_permission(request, view_func)


class TrustedProxyHeaderMiddleware(RemoteUserMiddleware):
    """Sign-in from an SSO/OIDC proxy's user header; off unless CLAIMLINE_TRUSTED_USER_HEADER is set.

    The header is believed only from CLAIMLINE_TRUSTED_PROXIES, since anyone else can send it too.
    """

    force_logout_if_no_header = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        header = settings.CLAIMLINE_TRUSTED_USER_HEADER
        self.header = "HTTP_" + header.upper().replace("-", "_") if header else ""  # type: ignore[misc]
        super().__init__(get_response)

    def __call__(self, request: HttpRequest) -> Any:
        if not self.header:
            return self.get_response(request)
        if request.META.get("REMOTE_ADDR") not in settings.CLAIMLINE_TRUSTED_PROXIES:
            request.META.pop(self.header, None)
            return self.get_response(request)
        return super().__call__(request)

    def process_request(self, request: HttpRequest) -> None:
        super().process_request(request)
        user = getattr(request, "user", None)
        groups_header = settings.CLAIMLINE_TRUSTED_GROUPS_HEADER
        if user is None or not user.is_authenticated or not groups_header:
            return
        raw = request.META.get("HTTP_" + groups_header.upper().replace("-", "_"), "")
        names = {g.strip() for g in raw.split(",") if g.strip()}
        # Only groups an admin created count: the proxy cannot invent grants.
        user.groups.set(Group.objects.filter(name__in=names))


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CLAIMLINE_CSP)
        return response


class BadRequestMiddleware:
    """Odd values in a request are the asker's mistake: a 400 saying what is wrong, not a 500.

    A NUL byte in the path or the query string is refused here, before any view compares it with stored
    names (PostgreSQL cannot hold one in text, so every such lookup raised ``DataError``); a view that
    finds a value it cannot use raises ``BadRequest`` with a message. The API answers in JSON, pages in HTML.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: Callable[..., Any], *args: Any) -> HttpResponse | None:
        # Here rather than in __call__: sign-in (a process_view too, earlier in the list) is asked first.
        problem = nul_byte_in(request)
        return bad_request(request, problem) if problem else None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, BadRequest):
            return bad_request(request, str(exception) or "bad request")
        return None


def nul_byte_in(request: HttpRequest) -> str:
    """What of the request holds a NUL byte (no name, path segment or value can), or ""."""
    if "\x00" in request.path:
        return "the path holds a NUL byte: no name can"
    for key, values in request.GET.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return f"the value of {key.replace(chr(0), '') or '(no name)'}= holds a NUL byte: no name or value can"
    return ""


def bad_request(request: HttpRequest, message: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": message}, status=400)
    if request.path.startswith("/metrics"):
        return HttpResponse(f"# {message}\n", status=400, content_type="text/plain")
    return render(request, "bad_request.html", {"message": message}, status=400)


class NotFoundPageMiddleware:
    """A page that is not there is the product's 404 page (its layout, a way back), in both modes.

    With ``DEBUG`` off Django renders ``handler404`` (``not_found``); with it on (the demo) Django shows its
    technical page instead, for a view's ``Http404`` and for an address no URL matches alike. So a view's
    ``Http404`` is answered here, and any other 404 of a page (one not rendered by ``not_found``) is
    replaced. The API and ``/metrics`` keep their own 404s (JSON, text).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 404 and not getattr(response, "product_page", False) and is_page(request):
            return not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404) and is_page(request):
            return not_found(request, exception)
        return None


def is_page(request: HttpRequest) -> bool:
    return not request.path.startswith(("/api/", "/metrics", "/static/"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 404 page (also ``handler404``). What the view said is shown to platform admins only: for a team
    member "no such claim" against "not found" would tell another team's UID from one that never existed."""
    user = getattr(request, "user", None)
    admin = user is not None and user.is_authenticated and is_platform_admin(user)
    message = str(exception or "") if admin else ""
    if message.startswith("{"):  # Django's Resolver404: the URL patterns tried, not a sentence
        message = ""
    match = getattr(request, "resolver_match", None)
    name = (match.kwargs.get("cluster") if match is not None else None) or _cluster_in_path(request.path)
    cluster = Cluster.objects.filter(name=name).first() if name else None
    response = render(request, "404.html", {"message": message, "cluster": cluster, "sees_all": admin}, status=404)
    response.product_page = True  # type: ignore[attr-defined]
    return response


def _cluster_in_path(path: str) -> str:
    parts = path.split("/")
    return parts[2] if len(parts) > 3 and parts[1] == "c" else ""
