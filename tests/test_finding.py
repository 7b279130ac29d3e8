"""Issue 20 item 2: search by any part of a Pod, claim, node or namespace name, with a results page, and the
Pods page (DRA Pods filtered by namespace, verdict reason, node and phase, a page at a time), each in the
signed-in user's scope: ``alice`` (team ml-training) never sees another namespace's names."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dashboard import finding
from tests.users import admin_and_alice

pytestmark = pytest.mark.django_db


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    return admin_and_alice()


OTHER_NAMESPACES = ("research/", "batch/", "inference/")


def results(client: Client, q: str) -> str:
    response = client.get("/c/demo/search", {"q": q})
    assert response.status_code == 200, (q, response.status_code)
    return response.content.decode()


def test_a_part_of_a_namespace_lists_its_pods_claims_and_the_namespace(clients: dict[str, Client]) -> None:
    html = results(clients["admin"], "training")
    for testid in ("search-pod", "search-resourceclaim", "search-namespace"):
        assert f'data-testid="{testid}"' in html, testid
    assert "/c/demo/pods/?namespace=ml-training" in html
    assert "ml-training/h100-bench" in html


def test_a_part_of_a_node_name_finds_the_node(clients: dict[str, Client]) -> None:
    for who in ("admin", "alice"):  # nodes are cluster-wide, as the inventory is
        html = results(clients[who], "worker")
        assert 'data-testid="search-node"' in html
        assert "/c/demo/inventory/?node=worker-" in html


def test_alice_finds_only_her_namespace(clients: dict[str, Client]) -> None:
    alice = clients["alice"]
    html = results(alice, "-")  # in nearly every name of the demo
    assert "ml-training/" in html
    for other in OTHER_NAMESPACES:
        assert other not in html, other
    assert "search-namespace" in html and "?namespace=research" not in html
    # Another team's names, whole or in part: nothing, not even a redirect.
    for q in ("llm-finetune", "report", "research", "batch/report-gpu"):
        response = alice.get("/c/demo/search", {"q": q})
        assert response.status_code == 200 and "No Pod, claim, node or namespace" in response.content.decode(), q


def test_the_results_page_is_an_htmx_partial_too(clients: dict[str, Client]) -> None:
    response = clients["admin"].get("/c/demo/search", {"q": "training"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="hits"' in html and "<html" not in html


def pods_page(client: Client, **params: str) -> str:
    response = client.get("/c/demo/pods/", params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def rows_of(html: str) -> list[str]:
    body = html.split('data-testid="pods"', 1)[1].split("</tbody>", 1)[0]
    return [row for row in body.split("<tr>")[2:] if "<td>" in row]


def test_the_pods_page_lists_dra_pods_with_verdict_node_and_phase(clients: dict[str, Client]) -> None:
    html = pods_page(clients["admin"])
    rows = rows_of(html)
    assert len(rows) > 3
    assert any("devices-in-use" in r for r in rows)  # the demo's waiting H100 Pod
    assert any(">ok<" in r for r in rows) and any("Running" in r for r in rows)
    assert any("worker-" in r for r in rows)
    assert 'href="/c/demo/pods/"' in html  # in the navigation


@pytest.mark.parametrize("key", ["namespace", "reason", "node", "phase"])
def test_each_filter_keeps_only_matching_pods(clients: dict[str, Client], key: str) -> None:
    admin = clients["admin"]
    every = rows_of(pods_page(admin))
    value = {"namespace": "ml-training", "reason": "devices-in-use", "node": "", "phase": "Running"}[key]
    if key == "node":
        value = next(v for v in ("worker-a100-0", "worker-h100-0") if any(v in r for r in every))
    kept = rows_of(pods_page(admin, **{key: value}))
    assert 0 < len(kept) < len(every)
    assert all(value in r for r in kept)


def test_alice_sees_only_her_pods_and_namespaces(clients: dict[str, Client]) -> None:
    html = pods_page(clients["alice"])
    rows = rows_of(html)
    assert rows and all("<td>ml-training</td>" in r for r in rows)
    for other in ("research", "batch", "inference"):
        assert f'<option value="{other}"' not in html
    # Asking for another namespace shows nothing of it.
    assert rows_of(pods_page(clients["alice"], namespace="research")) == []


def test_the_pods_page_pages(clients: dict[str, Client], monkeypatch: pytest.MonkeyPatch) -> None:
    import dashboard.diagnosis_views as views

    monkeypatch.setattr(views, "PODS_PER_PAGE", 2)
    first = pods_page(clients["admin"])
    assert len(rows_of(first)) == 2 and "page 1 of" in first and "page=2" in first
    second = pods_page(clients["admin"], page="2")
    assert len(rows_of(second)) == 2 and rows_of(second) != rows_of(first)


def test_filter_rows_offers_every_value_seen() -> None:
    rows = [
        {"namespace": "a", "reason": "ok", "node": "n1", "phase": "Running"},
        {"namespace": "b", "reason": "devices-in-use", "node": "", "phase": "Pending"},
    ]
    kept, choices = finding.filter_rows(rows, {"phase": "Pending"})
    assert kept == [rows[1]]
    assert choices == {
        "namespace": ["a", "b"],
        "reason": ["devices-in-use", "ok"],
        "node": ["n1"],
        "phase": ["Pending", "Running"],
    }


def test_rows_written_before_the_pods_page_columns_get_them_at_the_next_full_derivation(tmp_path: Any) -> None:
    """A document unchanged since an older version wrote its row still gets the Pods page's columns: the
    first snapshot derived after the upgrade (a full derivation) rewrites a head whose columns differ."""
    from derived.models import DerivedSnapshot, PodExplanation
    from tests import test_estimates as small
    from tests.snapshot_cli import import_objects

    snapshots = small.story(0)
    import_objects(tmp_path, snapshots[-1][1], at=small.T0)
    open_rows = PodExplanation.objects.filter(valid_to__isnull=True, name="train-a")
    assert list(open_rows.values_list("node", "phase", "reason")) == [("worker-0", "Running", "ok")]
    open_rows.update(node="", phase="", reason="", boundary="", created="")
    DerivedSnapshot.objects.update(version="older")
    import_objects(tmp_path, snapshots[-1][1], at=small.T0 + small.M)
    assert list(open_rows.values_list("node", "phase", "reason")) == [("worker-0", "Running", "ok")]
