"""Pages and API over stored history."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from demo import builders as b
from tests.clusters import T0, small_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(tmp_path: Path) -> list[dict]:
    objects = small_cluster()
    (tmp_path / "a.json").write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(tmp_path / "a.json"), "--at", T0.isoformat())
    later = copy.deepcopy(objects)
    claim = next(o for o in later if o["kind"] == "ResourceClaim")
    claim["status"]["reservedFor"] = []
    (tmp_path / "b.json").write_bytes(b.dump_json(later))
    call_command("import-snapshot", str(tmp_path / "b.json"), "--at", (T0 + timedelta(hours=1)).isoformat())
    return later


def test_home_redirects_to_the_default_cluster(admin_client: Client) -> None:
    response = admin_client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/c/demo/"


def test_claims_page_lists_claims(admin_client: Client, history: list[dict]) -> None:
    response = admin_client.get("/c/demo/claims")
    assert response.status_code == 200
    body = response.content.decode()
    for claim in (o for o in history if o["kind"] == "ResourceClaim"):
        assert claim["metadata"]["name"] in body
    assert "worker-0/gpu-0" in body and "reserved" in body and "allocated" in body
    assert "<html" in body


def test_claims_partial_for_htmx(admin_client: Client, history: list[dict]) -> None:
    response = admin_client.get("/c/demo/claims", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and 'id="claims"' in body
    assert "HX-Request" in response["Vary"]


def test_claim_page_shows_versions_with_their_changes(admin_client: Client, history: list[dict]) -> None:
    claim = next(o for o in history if o["kind"] == "ResourceClaim")
    response = admin_client.get(f"/c/demo/claims/{claim['metadata']['uid']}/")
    body = response.content.decode()
    assert response.status_code == 200
    versions = body[body.index('id="versions"') :]
    assert versions.count("<li>") == 2  # the boundaries' evidence above is a list too
    assert "status.reservedFor" in versions
    assert 'data-testid="claim-boundaries"' in body[: body.index('id="versions"')]


def test_unknown_claim_and_cluster_are_404(admin_client: Client, history: list[dict]) -> None:
    assert admin_client.get("/c/demo/claims/nope/").status_code == 404
    assert admin_client.get("/c/nope/").status_code == 404


def test_empty_cluster_says_how_to_collect(admin_client: Client) -> None:
    from collector.history_writer import get_cluster

    get_cluster("demo")
    assert "collect --once" in admin_client.get("/c/demo/claims").content.decode()
    assert "collect --once" in admin_client.get("/c/demo/").content.decode()


def test_api_snapshots_and_claims(admin_client: Client, history: list[dict]) -> None:
    snaps = admin_client.get("/api/snapshots").json()["snapshots"]
    assert [s["versions_written"] for s in snaps] == [1, len(history) - 1]  # not the Pod without claims
    claims = admin_client.get("/api/claims").json()
    assert claims["as_of"] == (T0 + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert {c["state"] for c in claims["claims"]} == {"reserved", "allocated"}


def test_snapshots_page(admin_client: Client, history: list[dict]) -> None:
    body = admin_client.get("/c/demo/snapshots/").content.decode()
    assert "import a.json" in body and "import b.json" in body


def test_names_from_the_cluster_are_escaped(admin_client: Client, tmp_path: Path) -> None:
    hostile = b.claim("team-a", "x", [b.request()], T0)
    hostile["metadata"]["name"] = "<script>alert(1)</script>"
    (tmp_path / "h.json").write_bytes(b.dump_json([hostile]))
    call_command("import-snapshot", str(tmp_path / "h.json"), "--at", T0.isoformat())
    body = admin_client.get("/c/demo/claims").content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_claims_list_filters_by_namespace_and_pages(admin_client: Client, tmp_path: Path) -> None:
    from dashboard.views import CLAIMS_PER_PAGE

    claims = [b.claim(f"ns-{i % 3}", f"c-{i:04d}", [b.request()], T0) for i in range(CLAIMS_PER_PAGE + 50)]
    (tmp_path / "many.json").write_bytes(b.dump_json(claims))
    call_command("import-snapshot", str(tmp_path / "many.json"), "--at", T0.isoformat())
    first = admin_client.get("/c/demo/claims").content.decode()
    assert first.count('href="/c/demo/claims/') == CLAIMS_PER_PAGE and "page 1 of 2" in first
    second = admin_client.get("/c/demo/claims", {"page": 2}).content.decode()
    assert second.count('href="/c/demo/claims/') == 50
    only = admin_client.get("/c/demo/claims", {"namespace": "ns-1"}).content.decode()
    assert only.count('href="/c/demo/claims/') == 83 and "<td>ns-2</td>" not in only


def test_inventory_renders_a_page_of_devices_and_one_node(
    admin_client: Client, history: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import report_views

    monkeypatch.setattr(report_views, "DEVICES_PER_PAGE", 3)
    first = admin_client.get("/c/demo/inventory/", secure=True).content.decode()
    assert "8 devices advertised" in first and "page 1 of 3" in first
    assert first.count('<a href="/c/demo/devices/') == 3
    last = admin_client.get("/c/demo/inventory/?page=3", secure=True).content.decode()
    assert last.count('<a href="/c/demo/devices/') == 2 and "worker-1" in last and "next →" not in last
    one = admin_client.get("/c/demo/inventory/?node=worker-0", HTTP_HX_REQUEST="true", secure=True)
    body = one.content.decode()
    assert "4 devices advertised on worker-0" in body and "worker-1" not in body.split("</p>", 1)[1]
    assert "<h1>" not in body and one["Vary"] and "HX-Request" in one["Vary"]
