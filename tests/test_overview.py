"""The overview (domain and page), the claims list's leak badges, and one definition of leaked device-hours."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client, override_settings

from access.models import NamespaceGrant
from collector.sources import parse_clusters
from demo.story import DEMO_BASE, demo_snapshots
from domain.cluster.state import MemoryHistory
from domain.reports.capacity import weekly_review
from domain.reports.leaks import Thresholds, find_leaks
from domain.reports.overview import across_clusters, overview
from domain.reports.redaction import Redactor, Scope
from domain.verdicts.explain import explain
from tests.story_counts import TEAM, devices_by_model, report_gpu_hours, stuck_pods

ADMIN = Redactor(Scope(admin=True), ())


@pytest.fixture(scope="module")
def history() -> MemoryHistory:
    return MemoryHistory(demo_snapshots(DEMO_BASE))


def member_redactor(history: MemoryHistory) -> Redactor:
    known = {o["metadata"]["name"] for o in history.state.of_kind("Namespace")}
    return Redactor(Scope(admin=False, namespaces=frozenset({TEAM})), known)


def _models(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {m["model"]: {k: m[k] for k in ("advertised", "allocated", "free")} for m in doc["inventory"]["models"]}


def _pods(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {g["reason"]: {f"{p['namespace']}/{p['name']}" for p in g["pods"]} for g in doc["pods"]["by_reason"]}


def test_devices_by_model_match_the_story(history: MemoryHistory) -> None:
    doc = overview(history, ADMIN)
    assert _models(doc) == devices_by_model()
    assert doc["inventory"]["advertised"] == sum(m["advertised"] for m in devices_by_model().values())
    assert {m["driver"] for m in doc["inventory"]["models"]} == {"gpu.nvidia.com"}


def test_pods_not_running_grouped_by_the_verdicts_own_reason(history: MemoryHistory) -> None:
    doc = overview(history, ADMIN)
    assert _pods(doc) == stuck_pods()
    assert doc["pods"]["total"] == sum(len(p) for p in stuck_pods().values())
    for group in doc["pods"]["by_reason"]:
        for pod in group["pods"]:
            verdict = explain(history, pod["namespace"], pod["name"])["verdict"]
            assert (verdict["boundary"], verdict["reason"], verdict["message"]) == (
                group["boundary"], group["reason"], pod["message"]
            )
    # Boundary order: allocation problems before preparation before runtime.
    assert [g["boundary"] for g in doc["pods"]["by_reason"]] == sorted(
        (g["boundary"] for g in doc["pods"]["by_reason"]), key=["inventory", "allocation", "preparation", "runtime"].index
    )


def test_flagged_claims_warnings_and_series(history: MemoryHistory) -> None:
    doc = overview(history, ADMIN)
    held, leaked = report_gpu_hours()
    assert doc["flagged"]["claims"] == 1 and doc["flagged"]["devices"] == 1
    assert (doc["flagged"]["device_hours"], doc["flagged"]["leaked_device_hours"]) == (held, leaked) == (3.0, 0.3)
    assert [(r["reason"], r["claims"]) for r in doc["flagged"]["by_reason"]] == [("orphaned-allocation", 1)]
    assert doc["warnings"] == {
        "total": 2,
        "by_kind": [{"kind": "admin-access-namespace", "count": 1}, {"kind": "device-taint-rule", "count": 1}],
    }
    last = doc["series"][-1]
    assert last["advertised"] == doc["inventory"]["advertised"]
    assert last["allocated"] == doc["inventory"]["allocated"]
    assert doc["series"][0]["at"] == doc["series_since"]


def test_a_team_member_sees_cluster_inventory_but_only_their_pods_claims_and_warnings(history: MemoryHistory) -> None:
    doc = overview(history, member_redactor(history))
    assert _models(doc) == devices_by_model()
    assert _pods(doc) == stuck_pods({TEAM})
    assert doc["flagged"]["claims"] == 0 and doc["flagged"]["top"] == []
    # The gpu-ops namespace's warning is another team's; a node's taint rule is inventory, seen by all.
    assert doc["warnings"] == {"total": 1, "by_kind": [{"kind": "device-taint-rule", "count": 1}]}
    # pretrain waits for H100s held by inference's llama-serve: the verdict stays, the other team's claim does not.
    assert "inference/" not in str(doc["pods"]) and "another namespace" in str(doc["pods"])


def test_across_clusters_adds_up(history: MemoryHistory) -> None:
    one = overview(history, ADMIN)
    both = across_clusters([one, one])
    assert both["inventory"]["advertised"] == 2 * one["inventory"]["advertised"]
    assert {m["model"]: m["free"] for m in both["inventory"]["models"]} == {
        m: 2 * c["free"] for m, c in devices_by_model().items()
    }
    assert both["flagged"] == 2 and both["leaked_device_hours"] == 0.6 and both["pods"] == 2 * one["pods"]["total"]


def test_leaked_device_hours_have_one_definition(history: MemoryHistory) -> None:
    """The retained page's leaked hours are the review's for a claim flagged inside the week."""
    th = Thresholds()
    entry = next(c for c in find_leaks(history, th)["claims"] if c["name"] == "report-gpu")
    held, leaked = report_gpu_hours()
    assert (entry["device_hours"], entry["leaked_device_hours"]) == (held, leaked)
    week_start = (DEMO_BASE - timedelta(days=DEMO_BASE.weekday())).replace(hour=0, minute=0)
    review = weekly_review(history, week_start, th)
    offender = next(o for o in review["top_offenders"] if o["name"] == "report-gpu")
    assert offender["leaked_device_hours"] == entry["leaked_device_hours"]
    assert entry["flagged_since"] == "2026-11-20T11:42:00Z"


# --- pages --------------------------------------------------------------------------------------------


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    team = Group.objects.create(name=TEAM)
    NamespaceGrant.objects.create(group=team, namespace=TEAM)
    member = User.objects.create_user("member")
    member.groups.add(team)
    out = {"admin": Client(), "member": Client()}
    out["admin"].force_login(User.objects.create_superuser("root"))
    out["member"].force_login(member)
    return out


@pytest.mark.django_db
def test_overview_page_for_an_admin(clients: dict[str, Client]) -> None:
    response = clients["admin"].get("/c/demo/")
    body = response.content.decode()
    assert response.status_code == 200 and "HX-Request" in response["Vary"]
    for reason, pods in stuck_pods().items():
        assert f'data-reason="{reason}" data-count="{len(pods)}"' in body
        for pod in pods:
            assert f'href="/c/demo/pods/{pod}/"' in body
    for model, counts in devices_by_model().items():
        row = body.split(f'data-model="{model}">', 1)[1].split("</tr>", 1)[0]
        # GPU-equivalents: a half-held partitioned GPU shows 0.5 allocated and 0.5 free.
        assert [float(x.split("<")[0]) for x in row.split('class="num">')[1:]] == [
            counts["advertised"], counts["allocated"], counts["free"]
        ]
    assert "batch/report-gpu" in body and 'href="/c/demo/retained/"' in body
    assert 'data-kind="admin-access-namespace"' in body and 'href="/c/demo/audit/' in body
    assert 'data-testid="collection"' in body and "ok</span>" in body
    assert 'data-plotly="overview-chart"' in body and 'id="overview-chart"' in body
    partial = clients["admin"].get("/c/demo/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and 'id="overview"' in partial


@pytest.mark.django_db
def test_overview_page_for_a_team_member(clients: dict[str, Client]) -> None:
    body = clients["member"].get("/c/demo/").content.decode()
    for pod in (p for pods in stuck_pods({TEAM}).values() for p in pods):
        assert f'href="/c/demo/pods/{pod}/"' in body
    for other in ("research/llm-finetune", "inference/embeddings-0", "report-gpu", "gpu-ops", "llama-serve"):
        assert other not in body
    total = sum(c["advertised"] for c in devices_by_model().values())
    assert f'<th class="num">{total}</th>' in body


@pytest.mark.django_db
def test_claims_list_badges_name_the_leak(clients: dict[str, Client]) -> None:
    body = clients["admin"].get("/c/demo/claims").content.decode()
    row = body.split(">report-gpu</a>", 1)[1].split("</tr>", 1)[0]
    assert "state-reserved" in row and 'class="state state-orphaned-allocation">orphaned-allocation<' in row
    healthy = body.split("llama-serve-0-gpu", 1)[1].split("</tr>", 1)[0]
    assert "orphaned" not in healthy


@pytest.mark.django_db
def test_home_across_several_clusters(clients: dict[str, Client]) -> None:
    with override_settings(CLAIMLINE_CLUSTERS=parse_clusters("demo=demo,lab=demo")):
        response = clients["admin"].get("/")
        body = response.content.decode()
        assert response.status_code == 200 and 'data-testid="fleet"' in body
        assert 'href="/c/demo/"' in body and 'data-cluster="lab"' in body and "No snapshot yet" in body
        for model, counts in devices_by_model().items():
            assert f'<tr data-model="{model}"><td>gpu.nvidia.com</td><td>{model}</td><td class="num">{counts["advertised"]}' in body
        assert "All clusters" in clients["admin"].get("/c/demo/").content.decode()


@pytest.mark.django_db
def test_retained_page_and_review_explain_and_agree_on_leaked_hours(clients: dict[str, Client]) -> None:
    held, leaked = report_gpu_hours()
    retained = clients["admin"].get("/c/demo/retained/").content.decode()
    review = clients["admin"].get("/c/demo/review/").content.decode()
    for body in (retained, review):
        assert 'data-testid="device-hours-note"' in body and "orphaned-allocation 15 min" in body
    row = retained.split('data-claim="batch/report-gpu"', 1)[1].split("</tr>", 1)[0]
    assert f'data-testid="held">{held}<' in row and f'data-testid="leaked">{leaked}<' in row
    offender = review.split('data-claim="batch/report-gpu"', 1)[1].split("</tr>", 1)[0]
    assert f'data-testid="offender-leaked">{leaked}<' in offender


@pytest.mark.django_db
def test_review_headers_weeks_and_print_view(clients: dict[str, Client]) -> None:
    client = clients["admin"]
    body = client.get("/c/demo/review/").content.decode()
    table = body.split('data-testid="review-table"', 1)[1].split("</thead>", 1)[0]
    assert "Allocated device-hours" in table and "Leaked device-hours" in table and "_" not in table
    assert 'data-testid="next-week"' not in body  # the snapshot's week is the last one
    assert client.get("/c/demo/review/", {"week": "2026-11-23"}).status_code == 404
    earlier = client.get("/c/demo/review/", {"week": "2026-11-09"}).content.decode()
    assert 'data-testid="next-week"' in earlier and "?week=2026-11-16" in earlier
    printable = client.get("/c/demo/review/", {"print": "1"}).content.decode()
    assert '<body class="print"' in printable and 'data-testid="review-table"' in printable
    # The CSV keeps its machine-readable header.
    assert client.get("/c/demo/review.csv").content.decode().startswith("week,scope,name,allocated_device_hours")


@pytest.mark.django_db
def test_claims_list_url_with_a_slash_redirects(clients: dict[str, Client]) -> None:
    response = clients["admin"].get("/c/demo/claims/", {"namespace": "batch"})
    assert response.status_code == 302 and response["Location"] == "/c/demo/claims?namespace=batch"


@pytest.mark.django_db
def test_audit_filters_by_kind_and_inventory_badges_leaks(clients: dict[str, Client]) -> None:
    admin = clients["admin"]
    only = admin.get("/c/demo/audit/", {"kind": "admin-access-namespace"}).content.decode()
    assert "gpu-ops" in only and "of kind <code>admin-access-namespace</code>" in only
    assert "gpu-ops" not in admin.get("/c/demo/audit/", {"kind": "stale-inventory"}).content.decode()
    inventory = admin.get("/c/demo/inventory/").content.decode()
    row = inventory.split(">batch/report-gpu</a>", 1)[1].split("</td>", 1)[0]
    assert "orphaned-allocation" in row
    assert "orphaned-allocation" not in clients["member"].get("/c/demo/inventory/").content.decode()


@pytest.mark.django_db
def test_collection_status_counts_failed_runs_and_says_when_stale(clients: dict[str, Client]) -> None:
    from django.utils import timezone

    from collector.models import Cluster, Snapshot

    body = clients["admin"].get("/c/demo/").content.decode()
    assert "state-ok" in body.split('data-testid="collection"', 1)[1].split("</p>", 1)[0]
    assert "stale" in body  # the demo's snapshots are days old
    now = timezone.now()
    Snapshot.objects.create(cluster=Cluster.objects.get(name="demo"), at=now, started=now, finished=now,
                            source="kubeconfig", status=Snapshot.Status.FAILED, error="connection refused")
    line = clients["admin"].get("/c/demo/").content.decode().split('data-testid="collection"', 1)[1].split("</p>")[0]
    assert "state-failed" in line and "1 failed since the last usable snapshot" in line and "stale" not in line
