"""What users reported on 1.37 clusters: a claim shown as ``deleted,allocated,reserved`` that a finalizer keeps with
its device, a Pod whose predecessor was force-deleted and whose claim kubelet will not prepare, a Pod referencing a
claim being deleted; and what the audit, /metrics and notices make of taint rules, force deletions and unhealthy
devices. Imported with import-snapshot, read back with ``explain``/``leaks``/``audit --json`` as users do."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.reports.metrics import render_metrics
from domain.reports.notices import DEVICE_HEALTH, device_health_subjects
from tests.snapshot_cli import AT, cli_json, import_objects

pytestmark = pytest.mark.django_db

NS = "ml"
NODE = "worker-0"
CREATED = AT - timedelta(days=3)
M = timedelta(minutes=1)
H = timedelta(hours=1)
KUBELET_FORCE_DELETED = (
    "Failed to prepare dynamic resources: old ResourceClaim with same name {claim} and different UID {uid} "
    "still exists (previous pod force-deleted?!)"
)

Obj = dict[str, Any]


def platform(*extra: Obj) -> list[Obj]:
    return [
        b.namespace(NS, created=CREATED),
        b.device_class(created=CREATED),
        b.node(NODE, CREATED),
        b.resource_slice(NODE, b.gpu_devices(NODE, 4), created=CREATED),
        *extra,
    ]


def running(name: str, claim_name: str, device: str, **kwargs: Any) -> Obj:
    started = AT - 2 * H
    return b.pod(
        NS,
        name,
        started - M,
        claims=[("gpu", {"claim": claim_name})],
        node_name=NODE,
        phase="Running",
        conditions=b.running_conditions(started - M, started),
        container_state=b.state_running(started),
        **kwargs,
    )


# --- stuck-deletion says what holds the claim and what releases it -----------------------------------------


def test_deleted_allocated_reserved_claim_held_by_its_running_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = running("serve", "model-gpu", "gpu-1")
    claim = b.claim(
        NS, "model-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], allocated_at=CREATED,
        reserved_for=[pod], deletion_timestamp=AT - H,
    )
    import_objects(tmp_path, platform(pod, claim))
    (flagged,) = cli_json(capsys, "leaks")["claims"]
    assert flagged["reason"] == "stuck-deletion"
    message = flagged["message"]
    assert "finalizers (resource.kubernetes.io/delete-protection) keep it and its 1 device allocated" in message
    assert "it is still reserved for pod serve is running" in message
    assert "it is released when they end" in message


def test_deleted_claim_kept_by_a_foreign_finalizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = b.claim(
        NS, "model-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], allocated_at=CREATED,
        deletion_timestamp=AT - H, finalizers=[b.DELETE_PROTECTION, "gpu.example.com/fabric-detach"],
    )
    import_objects(tmp_path, platform(claim))
    (flagged,) = cli_json(capsys, "leaks")["claims"]
    assert flagged["reason"] == "stuck-deletion"
    assert "nothing reserves it, yet it is still allocated" in flagged["message"]
    assert "gpu.example.com/fabric-detach is not Kubernetes' own" in flagged["message"]


def test_a_deletion_just_requested_is_not_stuck(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = running("serve", "model-gpu", "gpu-1")
    claim = b.claim(
        NS, "model-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], allocated_at=CREATED,
        reserved_for=[pod], deletion_timestamp=AT - 5 * M,
    )
    import_objects(tmp_path, platform(pod, claim))
    assert cli_json(capsys, "leaks")["claims"] == []


# --- a Pod referencing a claim being deleted -----------------------------------------------------------------


def test_a_pod_referencing_a_claim_being_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = running("old", "model-gpu", "gpu-1")
    claim = b.claim(
        NS, "model-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], allocated_at=CREATED,
        reserved_for=[holder], deletion_timestamp=AT - 10 * M,
    )
    waiting = b.pod(
        NS, "new", AT - 5 * M, claims=[("gpu", {"claim": "model-gpu"})],
        conditions=[b.unschedulable(AT - 4 * M, 'resourceclaim "model-gpu" is being deleted')],
    )
    import_objects(tmp_path, platform(holder, claim, waiting))
    verdict = cli_json(capsys, "explain", f"{NS}/new")["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "claim-missing"), verdict
    assert "ResourceClaim ml/model-gpu, which is being deleted" in verdict["message"]
    assert "it is still reserved for pods old" in verdict["message"]
    # The Pod it is reserved for runs on: its own verdict does not change.
    assert cli_json(capsys, "explain", f"{NS}/old")["verdict"]["reason"] == "ok"


def test_a_pod_referencing_a_live_claim_is_not_told_it_is_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = b.claim(NS, "model-gpu", [b.request()], CREATED)
    waiting = b.pod(NS, "new", AT - 5 * M, claims=[("gpu", {"claim": "model-gpu"})])
    import_objects(tmp_path, platform(claim, waiting))
    assert cli_json(capsys, "explain", f"{NS}/new")["verdict"]["reason"] == "waiting-for-scheduler"


# --- a force-deleted predecessor ------------------------------------------------------------------------------


def _force_deleted(tmp_path: Path) -> tuple[Obj, Obj, str]:
    """worker-0 runs a StatefulSet Pod; it is force-deleted, its claim recreated under a new UID for the next one."""
    tpl = b.claim_template(NS, "one-gpu", [b.request()], created=CREATED)
    first = running("train-0", "train-0-gpu", "gpu-1", incarnation=0)
    old_claim = b.claim(
        NS, "train-0-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], allocated_at=CREATED,
        reserved_for=[first],
    )
    import_objects(tmp_path, platform(tpl, first, old_claim), AT - 20 * M)
    second = b.pod(
        NS, "train-0", AT - 10 * M, claims=[("gpu", {"claim": "train-0-gpu"})], node_name=NODE,
        conditions=b.stuck_conditions(AT - 10 * M, sandbox_ready=False), incarnation=1,
    )
    new_claim = b.claim(
        NS, "train-0-gpu", [b.request()], AT - 11 * M, allocated=[("gpu", NODE, "gpu-1")], allocated_at=AT - 10 * M,
        reserved_for=[second], incarnation=1,
    )
    message = KUBELET_FORCE_DELETED.format(claim="train-0-gpu", uid=old_claim["metadata"]["uid"])
    failure = b.event(second, "FailedPrepareDynamicResources", message, AT - 9 * M, AT - M, count=12)
    import_objects(tmp_path, platform(tpl, second, new_claim, failure), AT)
    return first, old_claim, message


def test_preparation_fails_after_a_force_deleted_predecessor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, old_claim, kubelet = _force_deleted(tmp_path)
    doc = cli_json(capsys, "explain", f"{NS}/train-0")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("preparation", "preparation-failed"), verdict
    assert kubelet in verdict["message"]  # quoted whole
    assert f"the Pod's previous incarnation {first['metadata']['uid']} (gone at " in verdict["message"]
    assert f"kubelet on {NODE} still holds claim train-0-gpu prepared under its old UID {old_claim['metadata']['uid']}" in verdict["message"]
    assert len(doc["incarnations"]) == 2
    warnings = cli_json(capsys, "audit")["warnings"]
    (force,) = [w for w in warnings if w["kind"] == "force-deleted-claim"]
    assert force["subject"] == NODE
    assert "Pod ml/train-0 cannot prepare the new claim (12x FailedPrepareDynamicResources" in force["message"]


def test_an_ordinary_preparation_failure_names_no_predecessor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = b.pod(
        NS, "train-0", AT - 10 * M, claims=[("gpu", {"claim": "g"})], node_name=NODE,
        conditions=b.stuck_conditions(AT - 10 * M, sandbox_ready=False),
    )
    claim = b.claim(NS, "g", [b.request()], CREATED, allocated=[("gpu", NODE, "gpu-1")], reserved_for=[pod])
    failure = b.event(pod, "FailedPrepareDynamicResources", "prepare devices failed: timeout", AT - 9 * M)
    import_objects(tmp_path, platform(pod, claim, failure))
    verdict = cli_json(capsys, "explain", f"{NS}/train-0")["verdict"]
    assert verdict["reason"] == "preparation-failed" and "previous incarnation" not in verdict["message"]
    assert [w for w in cli_json(capsys, "audit")["warnings"] if w["kind"] == "force-deleted-claim"] == []


# --- the audit shows taint rules with their EvictionInProgress condition ---------------------------------------


def test_audit_lists_taint_rules_and_their_eviction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cond = b.eviction_in_progress(AT - 2 * M, True, "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
    rule = b.device_taint_rule(
        "drain-gpu-1", b.taint("example.com/maintenance", "NoExecute", "drain"), AT - 5 * M, pool=NODE, device="gpu-1",
        conditions=[cond],
    )
    informs = b.device_taint_rule("heads-up", b.taint("example.com/firmware", "None"), AT - 5 * M, pool=NODE)
    import_objects(tmp_path, platform(rule, informs))
    found = {w["message"].split(" ")[1]: w for w in cli_json(capsys, "audit")["warnings"] if w["kind"] == "device-taint-rule"}
    assert found["drain-gpu-1"]["subject"] == NODE
    assert found["drain-gpu-1"]["message"] == (
        f"DeviceTaintRule drain-gpu-1 taints 1 device on node {NODE} (gpu-1) with example.com/maintenance=drain:NoExecute: "
        "new claims cannot get them and Pods of claims holding them are evicted; EvictionInProgress=True "
        "(PodsPendingEviction): 1 pod needs to be evicted in 1 namespace.."
    )
    assert "taints 4 devices" in found["heads-up"]["message"] and "informational only" in found["heads-up"]["message"]


# --- /metrics and notices count unhealthy devices ------------------------------------------------------------


def _unhealthy_cluster() -> list[Obj]:
    health = b.resource_health("gpu", None, [(b.GPU_DRIVER, NODE, "gpu-1")], "Unhealthy", "XID 79: GPU has fallen off the bus")
    sick = running("sick", "sick-gpu", "gpu-1", allocated_resources_status=[health])
    fine_health = b.resource_health("gpu", None, [(b.GPU_DRIVER, NODE, "gpu-2")], "Healthy")
    fine = running("fine", "fine-gpu", "gpu-2", allocated_resources_status=[fine_health])
    claims = [
        b.claim(NS, f"{p['metadata']['name']}-gpu", [b.request()], CREATED, allocated=[("gpu", NODE, d)], reserved_for=[p])
        for p, d in ((sick, "gpu-1"), (fine, "gpu-2"))
    ]
    return platform(sick, fine, *claims)


def test_metrics_count_claims_with_an_unhealthy_device() -> None:
    text = render_metrics(MemoryHistory([(AT, _unhealthy_cluster())]))
    assert f'claimline_unhealthy_device_claims{{namespace="{NS}",node="{NODE}"}} 1' in text
    assert f'claimline_pending_pods{{boundary="runtime",namespace="{NS}",reason="device-unhealthy"}} 1' in text


def test_a_notice_for_a_pod_on_an_unhealthy_device() -> None:
    (subject,) = device_health_subjects(MemoryHistory([(AT, _unhealthy_cluster())]))
    assert (subject.kind, subject.reason, subject.name) == (DEVICE_HEALTH, "device-unhealthy", f"{NS}/sick")
    assert 'Unhealthy for container main: "XID 79: GPU has fallen off the bus"' in subject.message
