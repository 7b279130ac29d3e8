"""Time travel without typing URLs: the header's time picker, internal links that keep the chosen ``as_of``,
and the Pod page's steps to the previous / next stored change of the Pod.

The picker is a ``datetime-local`` input (no zone: read as UTC, as the pages show times); a picked time is
redirected to its RFC 3339 form, so every URL carries the one spelling the views parse. Links keep the time
by ``AsOfLinksMiddleware``: in an HTML page asked with ``as_of``, each internal link (``href``, ``hx-get``)
without an ``as_of`` of its own gets it; the "live" link carries an empty ``as_of``, which means the newest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import urlencode

from collector.models import Cluster, ObjectVersion
from collector.timeparse import parse_rfc3339

# What a datetime-local input sends: minutes, optionally seconds and fractions, no zone.
_PICKED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$")
# Internal page links in a rendered page: the dashboard's pages, all under /c/, and links within a page (?…).
_LINK = re.compile(rb'(?P<attr>\s(?:href|hx-get))="(?P<url>(?:/c/|\?)[^"]*)"')


def asked_as_of(request: HttpRequest) -> str:
    """The page's ``as_of`` as asked, when it is a time (RFC 3339); empty for live or a malformed value."""
    value = request.GET.get("as_of") or ""
    try:
        parse_rfc3339(value, "as_of")
    except ValueError:
        return ""
    return value


def with_as_of(request: HttpRequest, url: str) -> str:
    """``url`` keeping the page's ``as_of`` (a redirect from a page of a past time stays at that time)."""
    as_of = asked_as_of(request)
    if not as_of or "as_of=" in url:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'as_of': as_of})}"


def picker(request: HttpRequest) -> dict[str, Any]:
    """Context for the header's picker: the asked time as the input shows it (UTC, to the second)."""
    as_of = asked_as_of(request)
    shown = parse_rfc3339(as_of, "as_of").astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if as_of else ""
    return {"picked_as_of": as_of, "picker_value": shown}


class AsOfLinksMiddleware:
    """Redirects a picked (zone-less) time to its RFC 3339 UTC form; makes a past time's page link to the
    same time."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        value = request.GET.get("as_of") or ""
        if _PICKED.match(value):
            query = request.GET.copy()
            query["as_of"] = datetime.fromisoformat(value).replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
            return HttpResponseRedirect(f"{request.path}?{query.urlencode()}")
        response = self.get_response(request)
        as_of = asked_as_of(request)
        if as_of and response.status_code == 200 and response.get("Content-Type", "").startswith("text/html"):
            kept = urlencode({"as_of": as_of}).encode()

            def keep(match: re.Match[bytes]) -> bytes:
                url = match["url"]
                if b"as_of=" in url:
                    return match[0]
                joined = b"&amp;" if b"?" in url else b"?"
                return match["attr"] + b'="' + url + joined + kept + b'"'

            response.content = _LINK.sub(keep, response.content)
        return response


def pod_steps(cluster: Cluster, namespace: str, name: str, at: datetime) -> dict[str, datetime | None]:
    """The snapshots to step to from the Pod page as of ``at``: the one that stored the change before the
    state shown (the newest stored at or before ``at``), and the first that stored one after ``at``. A change is
    a version of the Pod named ``namespace/name`` (any incarnation) or its deletion; two queries."""
    rows = ObjectVersion.objects.filter(cluster=cluster, kind="Pod", namespace=namespace, name=name)
    times = rows.values_list("snapshot__at", flat=True).distinct()
    shown_and_before: list[datetime] = list(times.filter(snapshot__at__lte=at).order_by("-snapshot__at")[:2])
    after: datetime | None = times.filter(snapshot__at__gt=at).order_by("snapshot__at").first()
    return {"previous": shown_and_before[1] if len(shown_and_before) > 1 else None, "next": after}
