"""Owner (platform admin), member (team granted ml-training) and outsider, on every page and API."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from access.models import NamespaceGrant
from collector.history_reader import latest_snapshot_time, namespaces_in_use
from collector.models import Cluster, ObjectVersion
from domain.boundaries.judgement import is_device_check
from tests.users import login

pytestmark = pytest.mark.django_db

OWN_POD = "ml-training/jupyter-alice-0"
OTHER_POD = "research/llm-finetune"


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    team = Group.objects.create(name="ml-training")
    NamespaceGrant.objects.create(group=team, namespace="ml-training")
    return {
        "owner": login("owner", ["platform-admins"]),
        "member": login("member", ["ml-training"]),
        "outsider": login("outsider"),
    }


def claim_uid(namespace: str) -> str:
    return ObjectVersion.objects.filter(kind="ResourceClaim", namespace=namespace).values_list("uid", flat=True)[0]


def body(client: Client, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_anonymous_pages_redirect_to_sign_in_and_api_answers_401(demo_history: Any) -> None:
    anonymous = Client()
    for url in ["/", "/c/demo/", f"/c/demo/pods/{OTHER_POD}/", "/c/demo/retained/", "/c/demo/review.csv",
                "/c/demo/inventory/", "/c/demo/audit/", "/c/demo/classes/", "/c/demo/playground/", "/c/demo/snapshots/"]:
        response = anonymous.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
    for url in ["/api/claims", "/api/snapshots", "/api/explain?pod=" + OTHER_POD, "/api/leaks", "/api/audit",
                "/api/match-devices?expression=true"]:
        assert anonymous.get(url).status_code == 401, url
    assert anonymous.get("/metrics").status_code == 401
    assert anonymous.get("/healthz").status_code == 200


def test_claims_list_is_scoped(clients: dict[str, Client]) -> None:
    assert "llm-finetune-gpu" in body(clients["owner"], "/c/demo/claims")
    member = body(clients["member"], "/c/demo/claims")
    assert "jupyter-alice-0-gpu" in member and "llm-finetune-gpu" not in member and "report-gpu" not in member
    assert "<td>research</td>" not in body(clients["outsider"], "/c/demo/claims")
    api = clients["member"].get("/api/claims").json()["claims"]
    assert api and {c["namespace"] for c in api} == {"ml-training"}
    assert clients["outsider"].get("/api/claims").json()["claims"] == []


@pytest.mark.parametrize("who", ["member", "outsider"])
def test_guessed_uids_and_names_of_other_teams_are_404(clients: dict[str, Client], who: str) -> None:
    client = clients[who]
    assert client.get(f"/c/demo/claims/{claim_uid('research')}/").status_code == 404
    assert client.get(f"/c/demo/pods/{OTHER_POD}/").status_code == 404
    assert client.get("/api/explain", {"pod": OTHER_POD}).status_code == 404
    assert "No Pod, claim, node or namespace" in body(client, "/c/demo/search", q="llm-finetune")


def test_owner_and_member_see_the_members_pod(clients: dict[str, Client]) -> None:
    for who in ("owner", "member"):
        assert clients[who].get(f"/c/demo/pods/{OWN_POD}/").status_code == 200
        assert clients[who].get(f"/c/demo/claims/{claim_uid('ml-training')}/").status_code == 200
        assert clients[who].get("/api/explain", {"pod": OWN_POD}).status_code == 200
    assert clients["outsider"].get(f"/c/demo/pods/{OWN_POD}/").status_code == 404


def test_other_teams_claims_holding_devices_are_redacted(clients: dict[str, Client]) -> None:
    # pretrain asks for 8 H100s that inference's llama-serve holds: the verdict stays devices-in-use,
    # but the member does not learn which claim of the other team holds them.
    owner = clients["owner"].get("/api/explain", {"pod": "ml-training/pretrain-8xh100-q7n4k"}).json()
    member = clients["member"].get("/api/explain", {"pod": "ml-training/pretrain-8xh100-q7n4k"}).json()
    assert owner["verdict"]["reason"] == member["verdict"]["reason"] == "devices-in-use"
    assert "inference/" in owner["verdict"]["message"]
    assert "inference/" not in str(member) and "llama-serve" not in str(member)
    assert "another namespace" in member["verdict"]["message"]


def test_leaks_audit_review_and_inventory_are_scoped(clients: dict[str, Client]) -> None:
    assert "report-gpu" in body(clients["owner"], "/c/demo/retained/")
    for who in ("member", "outsider"):
        client = clients[who]
        assert "report-gpu" not in body(client, "/c/demo/retained/")
        assert client.get("/api/leaks").json()["claims"] == []
        assert "gpu-ops" not in str(client.get("/api/audit").json())
        csv_text = body(client, "/c/demo/review.csv")
        assert "batch" not in csv_text and "report-gpu" not in csv_text
        device = body(client, "/c/demo/devices/gpu.nvidia.com/worker-a100-1/gpu-3/")
        assert "embeddings-0" not in device and "1 more claim in other namespaces" in device
        inventory = body(client, "/c/demo/inventory/")
        assert "llama-serve" not in inventory and "(another namespace)" in inventory
    assert "gpu-ops" in str(clients["owner"].get("/api/audit").json())
    assert "embeddings-0" in body(clients["owner"], "/c/demo/devices/gpu.nvidia.com/worker-a100-1/gpu-3/")
    assert "batch" in body(clients["owner"], "/c/demo/review.csv")
    member_review = body(clients["member"], "/c/demo/review/")
    assert "ml-training" in member_review and "inference" not in member_review


def test_cluster_inventory_and_playground_are_for_everyone(clients: dict[str, Client]) -> None:
    for client in clients.values():
        assert "28</strong> of 28" in body(client, "/c/demo/playground/", expression="device.driver == 'gpu.nvidia.com'")
        assert client.get("/api/match-devices", {"expression": "true"}).json()["total"] == 28  # worker-h100-mig-0 adds four devices
        assert body(client, "/c/demo/classes/")


def test_metrics_need_an_admin_or_the_token(clients: dict[str, Client], settings: Any) -> None:
    assert clients["owner"].get("/metrics").status_code == 200
    assert clients["member"].get("/metrics").status_code == 401
    settings.CLAIMLINE_METRICS_TOKEN = "s3cret-token"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_snapshot_errors_only_for_admins(clients: dict[str, Client]) -> None:
    from collector.models import Snapshot

    Snapshot.objects.filter(pk=Snapshot.objects.latest("at").pk).update(error="ResourceClaim item 3 (research/x)")
    assert "research/x" in str(clients["owner"].get("/api/snapshots").json())
    assert "research/x" not in str(clients["member"].get("/api/snapshots").json())
    assert "research/x" not in body(clients["member"], "/c/demo/snapshots/")


def test_opaque_device_config_only_for_admins(clients: dict[str, Client], tmp_path: Any) -> None:
    from datetime import timedelta

    from django.core.management import call_command

    from demo import builders as b
    from demo.story import DEMO_BASE

    configured = b.device_class(
        "gpu-mig", config=[{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": "secret-strategy"}}}]
    )
    (tmp_path / "c.json").write_bytes(b.dump_json([configured]))
    call_command("import-snapshot", str(tmp_path / "c.json"), "--at", (DEMO_BASE + timedelta(hours=1)).isoformat())
    assert "secret-strategy" in body(clients["owner"], "/c/demo/classes/")
    member = body(clients["member"], "/c/demo/classes/")
    assert "secret-strategy" not in member and "shown to platform admins" in member


def test_grant_namespace_command(demo_history: Any) -> None:
    from django.core.management import call_command

    call_command("grant-namespace", "research-team", "research", "batch")
    assert set(NamespaceGrant.objects.values_list("namespace", flat=True)) == {"research", "batch"}
    call_command("grant-namespace", "research-team", "batch", "--revoke")
    assert list(NamespaceGrant.objects.values_list("namespace", flat=True)) == ["research"]


def test_trusted_proxy_header_sign_in(demo_history: Any, settings: Any) -> None:
    from django.test import override_settings

    Group.objects.create(name="ml-training")
    NamespaceGrant.objects.create(group=Group.objects.get(name="ml-training"), namespace="ml-training")
    middleware = list(settings.MIDDLEWARE)
    with override_settings(
        CLAIMLINE_TRUSTED_USER_HEADER="X-Forwarded-User",
        CLAIMLINE_TRUSTED_GROUPS_HEADER="X-Forwarded-Groups",
        AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.RemoteUserBackend",
                                 "django.contrib.auth.backends.ModelBackend"],
        MIDDLEWARE=middleware,
    ):
        proxied = Client(REMOTE_ADDR="127.0.0.1")
        page = proxied.get("/c/demo/claims", HTTP_X_FORWARDED_USER="carol", HTTP_X_FORWARDED_GROUPS="ml-training,made-up")
        assert page.status_code == 200 and "jupyter-alice-0-gpu" in page.content.decode()
        assert list(User.objects.get(username="carol").groups.values_list("name", flat=True)) == ["ml-training"]
        spoofed = Client(REMOTE_ADDR="10.1.2.3").get("/c/demo/", HTTP_X_FORWARDED_USER="mallory")
        assert spoofed.status_code == 302 and not User.objects.filter(username="mallory").exists()


def test_two_teams_over_one_cached_history_each_get_their_own_redaction(clients: dict[str, Client]) -> None:
    from access.scope import redactor_with
    from collector.models import Cluster
    from collector.recent_history import open_history
    from domain.reports.redaction import known_namespaces

    research = login("researcher", ["research-team"])
    NamespaceGrant.objects.create(group=Group.objects.get(name="research-team"), namespace="research")
    history = open_history(None, None)
    cluster = Cluster.objects.get(name=history.cluster.name)
    member = redactor_with(User.objects.get(username="member"), cluster, lambda: known_namespaces(history.state))
    researcher = redactor_with(
        User.objects.get(username="researcher"), cluster, lambda: known_namespaces(history.state)
    )
    assert "research" in member.hidden and "ml-training" not in member.hidden
    assert "ml-training" in researcher.hidden and "research" not in researcher.hidden
    assert open_history(None, None).state is history.state  # the namespaces were read once, for both
    # And through the pages: each sees its own Pod and not the other's.
    assert clients["member"].get(f"/c/{cluster.name}/pods/{OWN_POD}/").status_code == 200
    assert research.get(f"/c/{cluster.name}/pods/{OWN_POD}/").status_code == 404
    assert research.get(f"/c/{cluster.name}/pods/{OTHER_POD}/").status_code == 200


def test_namespaces_in_use_among_a_documents_names_is_the_full_answer_cut_to_them(demo_history: Any) -> None:
    # A team member's Pod page asks only about the names its document refers to.
    cluster = Cluster.objects.get(name="demo")
    at = latest_snapshot_time(cluster)
    everything = namespaces_in_use(cluster, at)
    assert {"ml-training", "inference"} <= everything
    asked = {"inference", "nvidia.com", "no-such-namespace", "ml-training"}
    assert namespaces_in_use(cluster, at, among=asked) == everything & asked
    with CaptureQueriesContext(connection) as queries:
        assert namespaces_in_use(cluster, at, among=()) == set()
    assert len(queries) == 0


def test_claim_page_shows_its_boundaries_redacted_for_a_member(clients: dict[str, Client]) -> None:
    # The claim page reads the claim's stored boundary rows; the allocation message names the other
    # team's claim holding the devices, which only the owner sees.
    doc = clients["owner"].get("/api/explain", {"pod": "ml-training/pretrain-8xh100-q7n4k"}).json()
    uid = doc["claims"][0]["uid"]
    owner = body(clients["owner"], f"/c/demo/claims/{uid}/")
    member = body(clients["member"], f"/c/demo/claims/{uid}/")
    for page in (owner, member):
        assert 'data-testid="claim-boundaries"' in page and "devices-in-use" in page
        assert 'data-boundary="allocation"' in page and "pretrain-8xh100-q7n4k" in page
    assert "llama-serve" in owner
    assert "llama-serve" not in member and "another namespace" in member


def _evidence_blocks(page: str) -> list[str]:
    """Each boundary's summary, message and evidence list, as the shared partial renders them."""
    return re.findall(r'<details[^>]*data-testid="evidence">\s*(<summary>.*?</ul>)', page, re.DOTALL)


@pytest.mark.parametrize("who", ["owner", "member"])
def test_pod_and_claim_pages_render_one_claims_evidence_alike(clients: dict[str, Client], who: str) -> None:
    # Both pages include dashboard/_judgement.html: the claim page's card for the Pod says what the
    # Pod page's card for the claim says, but counts the per-device checks the Pod page lists.
    doc = clients["owner"].get("/api/explain", {"pod": "ml-training/pretrain-8xh100-q7n4k"}).json()
    pod_uid, claim = doc["pod"]["uid"], doc["claims"][0]
    pod = body(clients[who], "/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/")
    on_claim = body(clients[who], f"/c/demo/claims/{claim['uid']}/")
    blocks = _evidence_blocks(pod)
    assert "<summary>allocation · failed · <code>devices-in-use</code> <span class=\"code-label\">" in "".join(blocks)
    assert blocks == _evidence_blocks(on_claim)
    checks = sum(1 for e in claim["boundaries"]["allocation"]["evidence"] if is_device_check(e))
    listed = re.search(r'"device-checks"><summary>(\d+) devices checked</summary>(.*?)</table>', pod, re.DOTALL)
    assert listed and int(listed[1]) == checks > 0 and listed[2].count("<tr>") == checks + 1  # and the header
    pod_url = f"/c/demo/pods/ml-training/pretrain-8xh100-q7n4k/?uid={pod_uid}"
    assert f'{checks} devices checked: listed on <a href="{pod_url}">' in on_claim
    assert "<h4>Evidence</h4>" in on_claim and "<h3>Evidence</h3>" in pod
    if who == "member":
        assert "llama-serve" not in pod and "llama-serve" not in on_claim
        assert "another namespace" in "".join(blocks)
