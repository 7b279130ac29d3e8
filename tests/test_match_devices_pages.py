"""match-devices paged: ``/api/match-devices?limit=`` and the playground judge a page of devices at a time,
in (driver, pool, name) order, read from that page's device rows alone (issue 22: at 40,000 devices the
whole answer took 1.7 s for a process's first request). The pages put together are the whole answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client

import derived.match_stock
from access.models import NamespaceGrant
from collector.history_reader import StoredHistory
from collector.models import Cluster
from dashboard import diagnosis_views
from dashboard.continue_token import Continuation
from dashboard.selector_limits import match_devices_page, match_devices_typed
from demo import builders as b
from derived.models import DerivedSnapshot
from tests.clusters import T0
from tests.paging import every_page

pytestmark = pytest.mark.django_db

# Pool names a database collation orders otherwise than code points do (en_US ignores hyphens and case).
ODD_POOLS = ["a-b", "ab", "a.b", "a-c", "a/b", "b"]
MEMORY = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0"
EXPRESSIONS = ["true", MEMORY, "device.attributes['gpu.nvidia.com'].index > 2"]  # the last errs on some


def objects() -> list[dict[str, Any]]:
    """Nodes whose GPUs differ in memory, pools with odd names, a class, and claims holding devices."""
    out: list[dict[str, Any]] = [b.device_class("gpu.nvidia.com")]
    for i, pool in enumerate(ODD_POOLS):
        node = f"node-{i}"
        memory = "80Gi" if i % 2 else "40Gi"
        out += [b.node(node, T0), b.resource_slice(node, b.gpu_devices(node, 3, memory=memory), pool=pool)]
    out += [b.namespace("ml"), b.namespace("web")]
    out.append(b.claim("ml", "held", [b.request()], T0, allocated=[("gpu", "a-b", "gpu-1")], node="node-0"))
    out.append(b.claim("web", "other", [b.request()], T0, allocated=[("gpu", "ab", "gpu-0")], node="node-1"))
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    (tmp_path / "a.json").write_bytes(b.dump_json(objects()))
    call_command("import-snapshot", str(tmp_path / "a.json"), "--at", T0.isoformat())
    return Cluster.objects.get()


def walk(client: Client, expression: str, limit: int) -> list[dict[str, Any]]:
    """Every page of /api/match-devices, first to last."""
    kept = {"expression": expression, "limit": str(limit)}
    return every_page(client, "/api/match-devices", kept, kept)


def joined(pages: list[dict[str, Any]], field: str) -> list[Any]:
    return [entry for page in pages for entry in page[field]]


@pytest.mark.parametrize("from_rows", [True, False], ids=["from the rows", "from the state"])
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_pages_put_together_are_the_whole_answer(cluster: Cluster, expression: str, from_rows: bool) -> None:
    if not from_rows:
        DerivedSnapshot.objects.all().delete()  # the layer no longer covers it: read from the state
    whole = match_devices_typed(StoredHistory(cluster), expression, "gpu.nvidia.com")
    assert len(whole["matched"]) + len(whole["errors"]) + len(whole["rejected"]) == whole["total"] == 18
    for count in (1, 4, 18, 50):
        pages, after = [], None
        while True:
            found, last = match_devices_page(StoredHistory(cluster), expression, "gpu.nvidia.com", after, count)
            pages.append(found)
            if last is None:
                break
            after = last
        assert len(pages) == -(-18 // count)
        assert {page["total"] for page in pages} == {18}
        for field in ("matched", "errors", "rejected"):
            assert joined(pages, field) == whole[field], (count, field)
        assert all(len(p["matched"]) + len(p["errors"]) + len(p["rejected"]) <= count for p in pages)
    # Not vacuous: the devices are in code-point order of their pools, which en_US would sort otherwise.
    if expression == "true":
        assert [m["pool"] for m in whole["matched"]][::3] == sorted(ODD_POOLS)


def test_a_page_decodes_only_its_own_devices(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = []
    real = derived.match_stock.advertised_device

    def counted(*args: Any) -> Any:
        decoded.append(args[:3])
        return real(*args)

    monkeypatch.setattr(derived.match_stock, "advertised_device", counted)
    found, last = match_devices_page(StoredHistory(cluster), "true", None, ("gpu.nvidia.com", "a-c", "gpu-2"), 4)
    # The page's 4 devices and the one after, to know that more follow; no other device's row.
    assert decoded == [("gpu.nvidia.com", "a.b", f"gpu-{i}") for i in range(3)] + [
        ("gpu.nvidia.com", "a/b", f"gpu-{i}") for i in range(2)
    ]
    assert [m["device"] for m in found["matched"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-0"]
    assert last == ("gpu.nvidia.com", "a/b", "gpu-0") and found["total"] == 18


def test_the_api_pages_with_continue_tokens_and_redacts_each_page(cluster: Cluster) -> None:
    admin = User.objects.create_user("root", is_superuser=True, is_staff=True)
    member = User.objects.create_user("ann")
    group = Group.objects.create(name="ml-team")
    member.groups.add(group)
    NamespaceGrant.objects.create(group=group, cluster=cluster, namespace="ml")
    clients = {}
    for user in (admin, member):
        clients[user.username] = Client()
        clients[user.username].force_login(user)
    whole = clients["root"].get("/api/match-devices", {"expression": "true"}).json()
    assert "continue" not in whole  # no limit: the whole answer, as before paging
    for limit in (1, 5, 18):
        pages = walk(clients["root"], "true", limit)
        assert joined(pages, "matched") == whole["matched"]
        assert pages[-1]["continue"] == "" and {p["total"] for p in pages} == {18}
        assert all(p["as_of"] == pages[0]["as_of"] for p in pages)
    unavailable = {
        m["pool"]: m["unavailable"] for m in joined(walk(clients["ann"], "true", 5), "matched") if "unavailable" in m
    }
    # A member reads its own team's holder, and that another team's device is taken, not by whom.
    assert unavailable["a-b"] == "allocated to ml/held"
    assert unavailable["ab"].startswith("allocated to") and "web/other" not in unavailable["ab"]


def test_the_api_names_what_is_wrong_with_a_paged_request(cluster: Cluster) -> None:
    client = Client()
    client.force_login(User.objects.create_user("root", is_superuser=True, is_staff=True))
    token = client.get("/api/match-devices", {"expression": "true", "limit": "2"}).json()["continue"]
    wrong = {
        (("limit", "0"),): (400, "limit is a whole number from 1"),
        (("continue", "not-a-token"),): (400, "not one this server wrote"),
        (("continue", token), ("as_of", T0.isoformat())): (400, "pass as_of or continue, not both"),
        (("continue", token), ("cluster", "elsewhere")): (400, "continues the list of cluster"),
        (("continue", Continuation(cluster.name, T0.replace(year=2001), ("a", "b", "c")).encode()),): (
            410,
            "no snapshot at or before 2001",
        ),
    }
    for params, (status, words) in wrong.items():
        response = client.get("/api/match-devices", {"expression": "true", **dict(params)})
        assert response.status_code == status, (params, response.content)
        assert words in response.json()["error"]
    assert client.get("/api/match-devices", {"limit": "2"}).status_code == 400  # no expression


def test_the_playground_pages_a_large_inventory(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client()
    client.force_login(User.objects.create_user("root", is_superuser=True, is_staff=True))
    one_page = client.get(f"/c/{cluster.name}/playground/", {"expression": MEMORY}).content.decode()
    assert "<strong>9</strong> of 18 devices match" in one_page and "playground-next" not in one_page
    monkeypatch.setattr(diagnosis_views, "PLAYGROUND_PAGE", 5)
    url, query, matched, pages = f"/c/{cluster.name}/playground/", f"expression={MEMORY}", 0, 0
    while query:
        body = client.get(f"{url}?{query}", headers={"HX-Request": "true"}).content.decode()
        pages += 1
        assert "devices on this page match" in body and "18 devices in all" in body
        matched += int(body.split("<strong>", 1)[1].split("</strong>", 1)[0])
        following = [part for part in body.split('"') if part.startswith(url + "?") and "continue=" in part]
        query = following[0].split("?", 1)[1].replace("&amp;", "&") if following else ""
        assert pages <= 4
    assert (pages, matched) == (4, 9)
    # A token of another cluster, or of a snapshot no longer stored, is refused with a message.
    for token in (
        Continuation("elsewhere", T0, ("a", "b", "c")).encode(),
        Continuation(cluster.name, T0.replace(year=2001), ("a", "b", "c")).encode(),
        "not-a-token",
    ):
        body = client.get(url, {"expression": MEMORY, "continue": token}).content.decode()
        assert 'data-testid="playground-error"' in body and "devices match" not in body, token
