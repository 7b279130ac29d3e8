"""Sign-in for every page and API, an optional trusted-proxy sign-in, the Content-Security-Policy, and 400s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware, RemoteUserMiddleware
from django.contrib.auth.models import Group
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


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
