"""explain / match-devices / leaks / audit over stored history: CLI, /api/ and pages agree with the demo story."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from demo.story import DEMO_EXPECTATIONS

pytestmark = pytest.mark.django_db


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    call_command(*args, "--json")
    return orjson.loads(capsys.readouterr().out)


@pytest.mark.parametrize("pod", sorted(DEMO_EXPECTATIONS["pods"]))
def test_explain_gives_the_demo_verdicts(demo_history: Any, capsys: pytest.CaptureFixture[str], pod: str) -> None:
    doc = cli_json(capsys, "explain", pod)
    boundary, reason = DEMO_EXPECTATIONS["pods"][pod]
    assert (doc["verdict"]["boundary"], doc["verdict"]["reason"]) == (boundary, reason), doc["verdict"]["message"]
    assert len(doc["incarnations"]) == DEMO_EXPECTATIONS["incarnations"][pod]
    assert doc["verdict"]["message"].strip()
    assert {"namespace", "name", "uid"} <= set(doc["pod"])
    for claim in doc["claims"]:
        assert set(claim["boundaries"]) == {"inventory", "allocation", "preparation", "runtime"}


def test_explain_as_of_an_earlier_snapshot(demo_history: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from demo.story import stage_times

    at = stage_times(demo_history)[1].isoformat()
    for pod, (boundary, reason) in DEMO_EXPECTATIONS["stages"][1].items():
        doc = cli_json(capsys, "explain", pod, "--as-of", at)
        assert (doc["verdict"]["boundary"], doc["verdict"]["reason"]) == (boundary, reason)


def test_explain_unknown_pod_is_a_clear_error(demo_history: Any) -> None:
    with pytest.raises(CommandError, match="nope"):
        call_command("explain", "default/nope")
    with pytest.raises(CommandError, match="NAMESPACE/POD"):
        call_command("explain", "just-a-name")


def test_match_devices(demo_history: Any, capsys: pytest.CaptureFixture[str]) -> None:
    doc = cli_json(
        capsys, "match-devices", "--expression", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0"
    )
    # 8 H100s, plus on worker-h100-mig-0 the whole H100 PCIe, two 3g.40gb partitions and an L40S 48Gi.
    assert doc["total"] == 28
    assert len(doc["matched"]) == 10
    assert {d["pool"] for d in doc["matched"]} == {"worker-h100-0", "worker-h100-mig-0"}
    assert doc["errors"] == []
    assert len(doc["rejected"]) == 18
    assert doc["why_not"] == [
        "all 18 have memory 40Gi, which the request selector "
        "`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0` rejects"
    ]
    missing = cli_json(capsys, "match-devices", "--expression", "device.attributes['gpu.nvidia.com'].nope == 1")
    assert len(missing["errors"]) == 28 and missing["matched"] == []


def test_match_devices_bad_expression_exits_non_zero(demo_history: Any) -> None:
    with pytest.raises(CommandError, match="does not compile"):
        call_command("match-devices", "--expression", "device.driver ==")


def test_leaks_and_audit(demo_history: Any, capsys: pytest.CaptureFixture[str]) -> None:
    leaks = cli_json(capsys, "leaks")
    flagged = {f"{c['namespace']}/{c['name']}": c for c in leaks["claims"]}
    for claim, reason in DEMO_EXPECTATIONS["leaks"].items():
        assert flagged[claim]["reason"] == reason
        assert flagged[claim]["device_hours"] == pytest.approx(DEMO_EXPECTATIONS["leak_device_hours"][claim], rel=0.01)
    for claim in DEMO_EXPECTATIONS["not_leaked"]:
        assert claim not in flagged
    audit = cli_json(capsys, "audit")
    assert {(w["kind"], w["subject"]) for w in audit["warnings"]} >= set(DEMO_EXPECTATIONS["warnings"])


def test_api_matches_cli(demo_history: Any, admin_client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    pod = "research/llm-finetune"
    assert admin_client.get("/api/explain", {"pod": pod}).json() == cli_json(capsys, "explain", pod)
    assert admin_client.get("/api/leaks").json() == cli_json(capsys, "leaks")
    assert admin_client.get("/api/audit").json() == cli_json(capsys, "audit")
    bad = admin_client.get("/api/match-devices", {"expression": "device.driver =="})
    assert bad.status_code == 400 and "does not compile" in bad.json()["error"]
    assert admin_client.get("/api/explain", {"pod": "default/nope"}).status_code == 404
    assert admin_client.get("/api/explain", {"pod": pod, "cluster": "nope"}).status_code == 404


def test_metrics_exposition(demo_history: Any, admin_client: Client) -> None:
    response = admin_client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    for family in ("claimline_devices_advertised", "claimline_devices_allocated", "claimline_flagged_claims"):
        assert f"# TYPE {family} gauge" in text
    # The endpoint adds collection health from the snapshot runs: five imports, all ok.
    assert 'claimline_collection_last_run_status{status="ok"} 1' in text
    assert "claimline_collection_failures_since_success 0" in text
    assert 'claimline_pending_pods{boundary="allocation",namespace="research",reason="selector-unsatisfiable"}' in text


def test_pages_render(demo_history: Any, admin_client: Client) -> None:
    pages = {
        "/c/demo/pods/research/llm-finetune/": "selector-unsatisfiable",
        "/c/demo/retained/": "report-gpu",
        "/c/demo/review/": "Device-hours allocated",
        "/c/demo/inventory/": "worker-h100-0",
        "/c/demo/devices/gpu.nvidia.com/worker-a100-1/gpu-3/": "embeddings-0-gpu",
        "/c/demo/classes/": "gpu.nvidia.com",
        "/c/demo/audit/": "admin-access-namespace",
        "/c/demo/playground/?expression=device.driver+%3D%3D+%27gpu.nvidia.com%27": "28</strong> of 28",
    }
    for url, text in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert text in response.content.decode(), url
    csv_text = admin_client.get("/c/demo/review.csv").content.decode()
    assert csv_text.splitlines()[0].startswith("week,scope,name,allocated_device_hours")


def test_search_lands_on_the_pod(demo_history: Any, admin_client: Client) -> None:
    assert admin_client.get("/c/demo/search", {"q": "llm-finetune"})["Location"] == "/c/demo/pods/research/llm-finetune/"
    assert admin_client.get("/c/demo/search", {"q": "research/llm-finetune"})["Location"] == "/c/demo/pods/research/llm-finetune/"
    assert "No Pod, claim, node or namespace" in admin_client.get("/c/demo/search", {"q": "nothing"}).content.decode()


def test_a_recently_read_snapshot_is_not_reloaded(demo_history: Any, django_assert_max_num_queries: Any) -> None:
    from collector.recent_history import open_history

    first = open_history(None, None)
    first.state.of_kind("ResourceSlice")
    with django_assert_max_num_queries(3):
        again = open_history(None, None)
        assert again is first and again.state.of_kind("ResourceSlice")
    # An earlier snapshot is another history.
    from demo.story import stage_times

    assert open_history(None, stage_times(demo_history)[0]) is not first


def test_retained_page_filters_by_namespace_for_alert_links(demo_history: Any, admin_client: Client) -> None:
    """An alert's link names the namespace (retained/?namespace=…): the page shows its claims only."""
    batch = admin_client.get("/c/demo/retained/", {"namespace": "batch"}).content.decode()
    assert "batch/report-gpu" in batch and 'data-testid="leaks-namespace"' in batch
    other = admin_client.get("/c/demo/retained/", {"namespace": "research"}).content.decode()
    assert "batch/report-gpu" not in other and "0 flagged claims" in other
