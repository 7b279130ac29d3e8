"""/api/claims paged: ``limit`` and the opaque ``continue`` token, as the Kubernetes API pages lists."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from access.models import NamespaceGrant
from dashboard import api
from dashboard.continue_token import Continuation
from demo import builders as b
from derived.models import DerivedSnapshot
from tests.clusters import T0
from tests.paging import every_page

pytestmark = pytest.mark.django_db

# Names a database collation orders otherwise than code points do (en_US ignores hyphens and case).
ODD_NAMES = ["a-b", "ab", "a.b", "aB", "B", "a_b", "a-c"]


def claims() -> list[dict[str, Any]]:
    many = [b.claim(f"ns-{i % 3}", f"c-{i:03d}", [b.request()], T0) for i in range(25)]
    return many + [b.claim("odd", name, [b.request()], T0) for name in ODD_NAMES]


def imported(tmp_path: Path, objects: list[dict[str, Any]], at: Any, name: str) -> None:
    (tmp_path / name).write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(tmp_path / name), "--at", at.isoformat())


@pytest.fixture
def listed(tmp_path: Path) -> list[dict[str, Any]]:
    objects = claims()
    imported(tmp_path, objects, T0, "a.json")
    return objects


def walk(client: Client, limit: int | None, **params: str) -> list[dict[str, Any]]:
    """Every page of a paged list, first to last."""
    kept = {"limit": str(limit)} if limit else {}
    return every_page(client, "/api/claims", {**params, **kept}, kept)


def keys(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(c["namespace"], c["name"], c["uid"]) for c in entries]


def test_pages_add_up_to_the_unpaged_list_in_code_point_order(admin_client: Client, listed: list) -> None:
    whole = admin_client.get("/api/claims").json()
    assert set(whole) == {"as_of", "claims"}  # no limit asked: the shape it always had, every claim
    assert len(whole["claims"]) == len(listed)
    assert keys(whole["claims"]) == sorted(keys(whole["claims"]))  # namespace, name, UID by code point
    for limit in (1, 7, 32, 100):
        pages = walk(admin_client, limit)
        assert all(len(p["claims"]) <= limit for p in pages) and pages[-1]["continue"] == ""
        assert all(p["as_of"] == whole["as_of"] for p in pages)
        assert [c for p in pages for c in p["claims"]] == whole["claims"], limit
    assert len(walk(admin_client, 1)) == len(listed)  # a full last page says there is no more


def test_a_continued_list_keeps_its_snapshot(admin_client: Client, listed: list, tmp_path: Path) -> None:
    first = admin_client.get("/api/claims", {"limit": "10"}).json()
    later = [c for c in listed if c["metadata"]["name"] != "c-020"]  # one gone, one added, on either side
    later += [b.claim("aaa", "new", [b.request()], T0), b.claim("zzz", "new", [b.request()], T0)]
    imported(tmp_path, later, T0 + timedelta(hours=1), "b.json")
    rest = walk(admin_client, 10, **{"continue": first["continue"]})  # type: ignore[arg-type]
    assert [c for p in [first, *rest] for c in p["claims"]] == admin_client.get(
        "/api/claims", {"as_of": first["as_of"]}
    ).json()["claims"]
    assert {p["as_of"] for p in rest} == {first["as_of"]}
    fresh = [c for p in walk(admin_client, 10) for c in p["claims"]]
    assert len(fresh) == len(listed) + 1 and fresh[0]["namespace"] == "aaa"


def test_pages_read_on_read_equal_the_layers(admin_client: Client, listed: list) -> None:
    from_layer = walk(admin_client, 6)
    DerivedSnapshot.objects.all().delete()  # as history stored before the layer: claims read from the state
    assert walk(admin_client, 6) == from_layer


def test_a_team_member_pages_through_their_namespaces_only(listed: list) -> None:
    team = Group.objects.create(name="team-1")
    NamespaceGrant.objects.create(group=team, namespace="ns-1")
    NamespaceGrant.objects.create(group=team, namespace="odd")
    user = User.objects.create_user("member", password="pw")
    user.groups.add(team)
    member = Client()
    member.force_login(user)
    paged = [c for p in walk(member, 4) for c in p["claims"]]
    assert {c["namespace"] for c in paged} == {"ns-1", "odd"}
    assert paged == member.get("/api/claims").json()["claims"] and len(paged) == 8 + len(ODD_NAMES)


def test_a_later_page_costs_what_the_first_does(admin_client: Client, listed: list) -> None:
    admin_client.get("/api/claims", {"limit": "5"})  # the history opened and cached
    with CaptureQueriesContext(connection) as first:
        page = admin_client.get("/api/claims", {"limit": "5"}).json()
    for _ in range(3):
        page = admin_client.get("/api/claims", {"limit": "5", "continue": page["continue"]}).json()
    with CaptureQueriesContext(connection) as fourth:
        admin_client.get("/api/claims", {"limit": "5", "continue": page["continue"]})
    assert len(fourth) == len(first)
    listings = [q["sql"] for q in fourth if "claimlisting" in q["sql"]]
    assert len(listings) == 1 and "LIMIT 6" in listings[0] and "OFFSET" not in listings[0]  # a keyset page


def test_limits_and_tokens(admin_client: Client, listed: list, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (
        {"limit": "0"},
        {"limit": "-3"},
        {"limit": "ten"},
        {"limit": "1.5"},
        {"continue": "not-a-token"},
        {"continue": "eyJ4IjoxfQ"},
    ):
        response = admin_client.get("/api/claims", bad)
        assert response.status_code == 400 and "error" in response.json(), bad
    token = admin_client.get("/api/claims", {"limit": "2"}).json()["continue"]
    assert admin_client.get("/api/claims", {"continue": token, "as_of": T0.isoformat()}).status_code == 400
    assert admin_client.get("/api/claims", {"continue": token, "cluster": "other"}).status_code == 400
    # A continue token without limit takes the default page size; a limit over the largest is served as it.
    monkeypatch.setattr(api, "CLAIMS_DEFAULT_LIMIT", 4)
    monkeypatch.setattr(api, "CLAIMS_MAX_LIMIT", 3)
    assert len(admin_client.get("/api/claims", {"continue": token}).json()["claims"]) == 4
    assert len(admin_client.get("/api/claims", {"limit": "1000"}).json()["claims"]) == 3
    # A list whose snapshot is no longer stored is gone, as an expired token is in Kubernetes.
    gone = Continuation("demo", T0 + timedelta(minutes=5), ("ns-0", "c-000", "x")).encode()
    assert admin_client.get("/api/claims", {"continue": gone}).status_code == 410
    before = Continuation("demo", T0 - timedelta(minutes=5), ("ns-0", "c-000", "x")).encode()
    assert admin_client.get("/api/claims", {"continue": before}).status_code == 410
