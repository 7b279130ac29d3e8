"""A team member crawls everything reachable from the home page and never reads another team's names.

The member (group ml-training, granted the namespace ml-training, not a platform admin) follows every
same-site link, form action and htmx ``hx-get`` URL of every page it is shown, asks every API, and tries
the selector playground and ``/api/match-devices`` with a few selectors (one matches every device). No
response may name a Pod or ResourceClaim of a namespace the member may not see: the forbidden names come
from the stored history (every name ever stored in another namespace), so a new page or a new phrase
that names a holder is caught without this test knowing about it.
"""

from __future__ import annotations

import html
import re
from collections import deque
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import pytest
from django.contrib.auth.models import Group, User
from django.db.models import Q
from django.test import Client

from access.models import NamespaceGrant
from collector.models import ObjectVersion, Snapshot
from demo.story import SEL_A100, SEL_H100, SEL_OVER_80GI
from domain.cluster.timefmt import rfc3339
from domain.reports.capacity import week_containing
from domain.reports.redaction import HIDDEN

pytestmark = pytest.mark.django_db

TEAM_NAMESPACES = frozenset({"ml-training"})
SELECTORS = [
    "true",  # every device, with every holder
    "device.driver == 'gpu.nvidia.com'",
    SEL_H100,
    SEL_A100,
    SEL_OVER_80GI,
    "device.attributes['gpu.nvidia.com'].productName.contains('MIG')",
]
# Same-site URLs in attributes a browser (or htmx) would request with GET.
_LINK = re.compile(r'\b(href|hx-get|action)="([^"]*)"')
_NOT_FOLLOWED = ("/static/", "/accounts/logout/", "/admin/")
MAX_REQUESTS = 2000  # far above what the demo needs: a guard against a crawl that never ends


def _member(client_name: str = "alice") -> Client:
    team, _ = Group.objects.get_or_create(name="ml-training")
    NamespaceGrant.objects.get_or_create(group=team, namespace="ml-training")
    user = User.objects.create_user(client_name)
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    return client


def forbidden_names() -> set[str]:
    """Every Pod and claim name stored in a namespace the member may not see (and in none it may)."""
    rows = set(
        ObjectVersion.objects.filter(kind__in=["Pod", "ResourceClaim"]).values_list("namespace", "name").distinct()
    )
    visible = {name for namespace, name in rows if namespace in TEAM_NAMESPACES}
    return {name for namespace, name in rows if namespace not in TEAM_NAMESPACES} - visible


def _team_pods(at: datetime | None) -> list[tuple[str, str]]:
    """The member's Pods live as of ``at`` (None: the newest snapshot)."""
    rows = ObjectVersion.objects.filter(kind="Pod", namespace__in=TEAM_NAMESPACES, deleted=False)
    if at is not None:
        rows = rows.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at), valid_from__lte=at)
    else:
        rows = rows.filter(valid_to__isnull=True)
    return sorted(set(rows.values_list("namespace", "name")))


def _names_pattern(names: set[str]) -> re.Pattern[str]:
    # A whole name, not a part of a longer one (llama-serve-0 inside llama-serve-0-gpu-x is found as well).
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9])({alternatives})(?![a-z0-9])")


def _links(url: str, body: str) -> list[tuple[str, bool]]:
    """(URL, whether htmx asks for it) for each same-site GET target in ``body``."""
    found = []
    for attribute, raw in _LINK.findall(body):
        target = urljoin(url, html.unescape(raw))
        parts = urlsplit(target)
        if parts.scheme not in ("", "http") or parts.netloc not in ("", "testserver"):
            continue
        if not parts.path.startswith("/") or parts.path.startswith(_NOT_FOLLOWED):
            continue
        found.append((parts.path + (f"?{parts.query}" if parts.query else ""), attribute == "hx-get"))
    return found


def _json_urls(value: Any) -> list[str]:
    """``url`` fields of an API document (``/api/claims`` links each claim's page)."""
    if isinstance(value, dict):
        return [u for k, v in value.items() for u in ([v] if k == "url" and isinstance(v, str) else _json_urls(v))]
    if isinstance(value, list):
        return [u for v in value for u in _json_urls(v)]
    return []


class Crawl:
    def __init__(self, client: Client, forbidden: re.Pattern[str], oldest_week: str) -> None:
        self.client = client
        self.forbidden = forbidden
        self.oldest_week = oldest_week
        self.seen: set[tuple[str, bool]] = set()
        self.queue: deque[tuple[str, bool]] = deque()
        self.leaks: list[str] = []
        self.failures: list[str] = []
        self.requests = 0

    def add(self, url: str, htmx: bool = False) -> None:
        week = parse_qs(urlsplit(url).query).get("week")
        if week and week[0] < self.oldest_week:
            return  # "previous week" links go back forever; weeks before the history have nothing to show
        if (url, htmx) not in self.seen:
            self.seen.add((url, htmx))
            self.queue.append((url, htmx))

    def run(self) -> None:
        while self.queue:
            url, htmx = self.queue.popleft()
            self.requests += 1
            assert self.requests <= MAX_REQUESTS, f"the crawl did not end: {url}"
            response = self.client.get(url, **({"HTTP_HX_REQUEST": "true"} if htmx else {}))
            if response.status_code in (301, 302):
                self.add(response["Location"])
                continue
            body = b"".join(response.streaming_content) if response.streaming else response.content
            text = body.decode(errors="replace")
            # 204: a live page's poll finding nothing newer than what it shows (htmx keeps the page as it is).
            expected = (200, 204) if htmx else (200,)
            if response.status_code not in expected and not (url.startswith("/metrics") and response.status_code == 401):
                self.failures.append(f"{url} (htmx={htmx}): {response.status_code}")
            for match in self.forbidden.finditer(text):
                context = text[max(match.start() - 80, 0) : match.end() + 40].replace("\n", " ")
                self.leaks.append(f"{url} (htmx={htmx}) names {match.group(1)!r}: …{context}…")
            if response.get("Content-Type", "").startswith("application/json"):
                for link in _json_urls(response.json()):
                    self.add(link)
            elif response.get("Content-Type", "").startswith("text/html"):
                for link, by_htmx in _links(url, text):
                    self.add(link)
                    if by_htmx:
                        self.add(link, htmx=True)


def test_a_team_member_never_reads_another_teams_pod_or_claim_names(demo_history: Any) -> None:
    names = forbidden_names()
    # The demo's other teams: their Pods and claims are in the list (else the test would prove nothing).
    assert {"llama-serve-0", "llm-finetune", "mig-notebook-carol", "report-gpu"} <= names
    client = _member()
    cluster = "demo"
    snapshots = list(Snapshot.objects.filter(cluster__name=cluster, status=Snapshot.Status.OK).order_by("at").values_list("at", flat=True))
    oldest_week = week_containing(snapshots[0]).date().isoformat()
    crawl = Crawl(client, _names_pattern(names), oldest_week)

    crawl.add("/")
    # The APIs, as of every snapshot: what holds which device changes from one to the next.
    classes = sorted(set(ObjectVersion.objects.filter(kind="DeviceClass").values_list("name", flat=True)))
    for at in [None, *snapshots]:
        as_of = {"as_of": rfc3339(at)} if at else {}
        for path in ("/api/claims", "/api/snapshots", "/api/leaks", "/api/audit"):
            crawl.add(f"{path}?{urlencode(as_of)}" if as_of else path)
        for namespace, name in _team_pods(at):
            crawl.add(f"/api/explain?{urlencode({'pod': f'{namespace}/{name}', **as_of})}")
        for expression in SELECTORS:
            for class_name in ["", *classes]:
                query = {"expression": expression, **({"class": class_name} if class_name else {}), **as_of}
                crawl.add(f"/api/match-devices?{urlencode(query)}")
    crawl.add("/metrics")
    for expression in SELECTORS:
        for class_name in ["", *classes]:
            query = urlencode({"expression": expression, "class": class_name})
            crawl.add(f"/c/{cluster}/playground/?{query}")
            crawl.add(f"/c/{cluster}/playground/?{query}", htmx=True)
    crawl.run()

    visited = {urlsplit(u).path for u, _ in crawl.seen}
    # The crawl reached the pages a member has: its own Pods and claims, devices, the playground.
    for expected in ("/c/demo/inventory/", "/c/demo/playground/", "/c/demo/review/", "/c/demo/notices/"):
        assert expected in visited, expected
    assert any(p.startswith("/c/demo/pods/ml-training/") for p in visited)
    assert any(p.startswith("/c/demo/claims/") and p != "/c/demo/claims/" for p in visited)
    assert any(p.startswith("/c/demo/devices/") for p in visited)
    assert not crawl.failures, "\n".join(crawl.failures[:20])
    # One line per page (without its query) and name: the same leak repeats over selectors and snapshots.
    distinct = {(leak.split("?")[0].split(" ")[0], leak.split(" names ")[1].split(":")[0]): leak for leak in crawl.leaks}
    assert not crawl.leaks, f"{len(crawl.leaks)} leaks, e.g.:\n" + "\n".join(list(distinct.values())[:40])


def test_match_devices_says_a_device_is_taken_without_naming_another_teams_claim(demo_history: Any) -> None:
    owner = Client()
    owner.force_login(User.objects.create_superuser("root"))
    member = _member()
    asked = {"expression": "true"}
    seen = {who: c.get("/api/match-devices", asked).json()["matched"] for who, c in (("owner", owner), ("member", member))}
    taken = {who: [m["unavailable"] for m in found if m.get("available") is False] for who, found in seen.items()}
    # The same devices are unavailable to both: only who holds them is said differently.
    assert len(taken["owner"]) == len(taken["member"]) > 0
    assert any(t.startswith("allocated to inference/llama-serve-0-gpu-") for t in taken["owner"])
    assert any("research/mig-notebook-carol-gpu-" in t and "holds 40Gi" in t for t in taken["owner"])
    assert f"allocated to {HIDDEN}" in taken["member"]
    assert any(f"{HIDDEN} holds 40Gi" in t for t in taken["member"])
    # The member's own team's claims are still named.
    own = [t for t in taken["owner"] if "ml-training/" in t]
    assert own and all(t in taken["member"] for t in own)
    page = member.get("/c/demo/playground/", asked).content.decode()
    assert f"no: allocated to {HIDDEN}" in page and "llama-serve" not in page


def test_the_pod_pages_device_checks_say_who_holds_a_device_as_redacted(demo_history: Any) -> None:
    # pretrain waits for H100s inference's llama-serve holds: each held device's row says by whom.
    owner = Client()
    owner.force_login(User.objects.create_superuser("root"))
    url = "/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/"
    held = re.compile(r"<code>held</code>(?: <span class=\"code-label\">[^<]*</span>)?</td><td>([^<]*)</td>")
    by_owner = held.findall(owner.get(url).content.decode())
    by_member = held.findall(_member().get(url).content.decode())
    assert len(by_owner) == len(by_member) > 0
    assert any(h.startswith("inference/llama-serve-0-gpu-") for h in by_owner)
    # The member's own team's claim is named; the other team's is not.
    assert {h for h in by_owner if h.startswith("ml-training/")} == {h for h in by_member if h != HIDDEN} != set()
    assert HIDDEN in by_member
