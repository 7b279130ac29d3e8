"""Devices taken away from a running Pod: NoExecute taints the eviction controller acts on (device-taint-eviction),
DeviceTaintRules in their resource.k8s.io/v1 shape when a pending Pod is judged (devices-tainted), and kubelet's
device health (device-unhealthy). Each with a healthy look-alike, imported with import-snapshot and read back with
``explain --json`` as users do."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from tests.snapshot_cli import AT, cli_json, explain_verdict, import_objects

pytestmark = pytest.mark.django_db

NS = "ml"
NODE = "worker-0"
CREATED = AT - timedelta(days=3)
M = timedelta(minutes=1)
MAINTENANCE = b.taint("example.com/maintenance", "NoExecute", "drain", time_added=AT - 10 * M)

Obj = dict[str, Any]


def platform(*extra: Obj, device_taints: dict[str, list[Obj]] | None = None) -> list[Obj]:
    taints = device_taints or {}
    devices = [b.gpu_device(f"gpu-{i}", node=NODE, taints=taints.get(f"gpu-{i}")) for i in range(4)]
    return [
        b.namespace(NS, created=CREATED),
        b.device_class(created=CREATED),
        b.node(NODE, CREATED),
        b.resource_slice(NODE, devices, created=CREATED),
        *extra,
    ]


def running(
    name: str = "train",
    device: str = "gpu-1",
    conditions: list[Obj] | None = None,
    tolerations: list[Obj] | None = None,
    **kwargs: Any,
) -> list[Obj]:
    """A running Pod on ``device`` with its generated claim (tolerations on the request and its result)."""
    tpl = b.claim_template(NS, "one-gpu", [b.request(tolerations=tolerations)], created=CREATED)
    created = AT - 2 * timedelta(hours=1)
    sched, started = created + timedelta(seconds=2), created + M
    pod = b.pod(
        NS,
        name,
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name=NODE,
        phase="Running",
        conditions=[*b.running_conditions(sched, started), *(conditions or [])],
        container_state=b.state_running(started),
        **kwargs,
    )
    result: Obj = {"request": "gpu", "pool": NODE, "device": device}
    if tolerations:
        result["tolerations"] = tolerations  # the allocator copies the request's tolerations into the result
    claim = b.template_claim(tpl, pod, allocated=[result], allocated_at=sched, reserved_for=[pod])
    return [tpl, pod, claim]


def eviction_event(pod: Obj, message: str = "Marking for deletion", at: datetime = AT - 2 * M) -> Obj:
    return b.event(pod, "DeviceTaintManagerEviction", message, at, type="Normal", component="device-taint-eviction-controller")


def rule(name: str, taint: Obj, **kwargs: Any) -> Obj:
    return b.device_taint_rule(name, taint, AT - 15 * M, pool=NODE, **kwargs)


# --- device-taint-eviction ---------------------------------------------------------------------------


def test_rule_noexecute_taint_evicting_the_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drain = rule(
        "drain-gpu-1",
        MAINTENANCE,
        device="gpu-1",
        conditions=[b.eviction_in_progress(AT - 2 * M, True, "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")],
    )
    objects = platform(drain, *running(conditions=[b.disruption_target(AT - 2 * M)]))
    import_objects(tmp_path, objects)
    doc = cli_json(capsys, "explain", f"{NS}/train")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("inventory", "device-taint-eviction"), verdict
    message = verdict["message"]
    assert f"device gpu.nvidia.com/{NODE}/gpu-1" in message
    assert "example.com/maintenance=drain:NoExecute" in message and "DeviceTaintRule drain-gpu-1" in message
    assert "DisruptionTarget DeletionByDeviceTaintManager" in message
    evidence = doc["claims"][0]["boundaries"]["inventory"]["evidence"]
    (shown,) = [e for e in evidence if e.get("kind") == "DeviceTaintRule"]
    assert shown["name"] == "drain-gpu-1" and shown["evictionInProgress"]["status"] == "True"
    (device,) = [e for e in evidence if e.get("kind") == "Device"]
    assert device["taints"] == [
        {
            "key": "example.com/maintenance",
            "value": "drain",
            "effect": "NoExecute",
            "timeAdded": b.ts(AT - 10 * M),
            "source": "DeviceTaintRule drain-gpu-1",
        }
    ]


def test_slice_taint_and_the_eviction_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = running()
    objects.append(eviction_event(objects[1]))
    verdict = explain_verdict(tmp_path, capsys, platform(*objects, device_taints={"gpu-1": [MAINTENANCE]}), f"{NS}/train")
    assert verdict["reason"] == "device-taint-eviction"
    assert f"from slice {NODE}" in verdict["message"] and 'DeviceTaintManagerEviction "Marking for deletion"' in verdict["message"]


def test_an_evicted_and_deleted_pod_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drain = rule("drain-gpu-1", MAINTENANCE, device="gpu-1")
    bystander = running("serve", "gpu-2")[1:]  # Pods stay listed in the next dump: the evicted one is deleted
    before = platform(drain, *running(conditions=[b.disruption_target(AT - 2 * M)]), *bystander)
    import_objects(tmp_path, before, AT - M)
    gone = [o for o in before if not (o["kind"] == "Pod" and o["metadata"]["name"] == "train")]
    import_objects(tmp_path, gone, AT)
    verdict = cli_json(capsys, "explain", f"{NS}/train")["verdict"]
    assert verdict["reason"] == "device-taint-eviction"
    assert verdict["message"].startswith("the Pod was deleted at ")


@pytest.mark.parametrize(
    ("case", "taint", "tolerations", "event"),
    [
        ("effect None informs", b.taint("example.com/maintenance", "None", "drain"), None, None),
        ("tolerated for good", MAINTENANCE, [b.toleration("example.com/maintenance", "Exists", effect="NoExecute")], None),
        ("no eviction yet", MAINTENANCE, None, None),
        ("eviction cancelled", MAINTENANCE, None, "Cancelling deletion"),
        ("NoSchedule keeps new claims off only", b.taint("example.com/maintenance", "NoSchedule"), None, "Marking for deletion"),
    ],
)
def test_look_alikes_stay_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, taint: Obj, tolerations: list[Obj] | None, event: str | None
) -> None:
    objects = running(tolerations=tolerations)
    if event is not None:
        objects.append(eviction_event(objects[1], event))
    verdict = explain_verdict(tmp_path, capsys, platform(rule("r", taint, device="gpu-1"), *objects), f"{NS}/train")
    assert verdict["reason"] == "ok", (case, verdict)


def test_a_toleration_without_noexecute_effect_does_not_keep_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The eviction controller only honours tolerations that name the NoExecute effect.
    objects = running(tolerations=[b.toleration("example.com/maintenance", "Exists")], conditions=[b.disruption_target(AT - M)])
    verdict = explain_verdict(tmp_path, capsys, platform(rule("r", MAINTENANCE, device="gpu-1"), *objects), f"{NS}/train")
    assert verdict["reason"] == "device-taint-eviction"


def test_toleration_seconds_only_defer_the_eviction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tolerations = [b.toleration("example.com/maintenance", "Exists", effect="NoExecute", toleration_seconds=300)]
    objects = running(tolerations=tolerations, conditions=[b.disruption_target(AT - M)])
    verdict = explain_verdict(tmp_path, capsys, platform(rule("r", MAINTENANCE, device="gpu-1"), *objects), f"{NS}/train")
    assert verdict["reason"] == "device-taint-eviction"
    assert "which the claim tolerates for only 300s" in verdict["message"]


# --- DeviceTaintRules when a pending Pod is judged ------------------------------------------------------


def pending(name: str = "wait") -> list[Obj]:
    tpl = b.claim_template(NS, "one-gpu", [b.request()], created=CREATED)
    pod = b.pod(
        NS,
        name,
        AT - 5 * M,
        claims=[("gpu", {"template": "one-gpu"})],
        conditions=[b.unschedulable(AT - 4 * M, "0/1 nodes are available: 1 cannot allocate all claims.")],
    )
    return [tpl, pod, b.template_claim(tpl, pod)]


def test_a_v1_rule_over_the_pool_makes_a_pending_pod_devices_tainted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_schedule = rule("pool-maintenance", b.taint("example.com/maintenance", "NoSchedule", "true"))
    verdict = explain_verdict(tmp_path, capsys, platform(no_schedule, *pending()), f"{NS}/wait")
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-tainted"), verdict
    assert "example.com/maintenance=true:NoSchedule (DeviceTaintRule pool-maintenance) (4)" in verdict["message"]


def test_a_rule_without_a_device_selector_taints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unselective = b.device_taint_rule("nothing", b.taint("example.com/maintenance", "NoSchedule"), AT, selector=False)
    verdict = explain_verdict(tmp_path, capsys, platform(unselective, *pending()), f"{NS}/wait")
    assert verdict["reason"] == "waiting-for-scheduler", verdict


def test_an_effect_none_rule_leaves_a_pending_pod_fitting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    informs = rule("heads-up", b.taint("example.com/maintenance", "None"))
    verdict = explain_verdict(tmp_path, capsys, platform(informs, *pending()), f"{NS}/wait")
    assert verdict["reason"] == "waiting-for-scheduler", verdict


# --- device-unhealthy ------------------------------------------------------------------------------------

ECC = "ECC error count exceeded threshold (XID 48)"


@pytest.mark.parametrize("request_name", [None, "gpu"], ids=["claim:<pod claim>", "claim:<pod claim>/<request>"])
def test_kubelet_reports_a_device_unhealthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], request_name: str | None
) -> None:
    health = b.resource_health("gpu", request_name, [(b.GPU_DRIVER, NODE, "gpu-1")], "Unhealthy", ECC)
    verdict = explain_verdict(tmp_path, capsys, platform(*running(allocated_resources_status=[health])), f"{NS}/train")
    assert (verdict["boundary"], verdict["reason"]) == ("runtime", "device-unhealthy"), verdict
    assert f"device gpu.nvidia.com/{NODE}/gpu-1 of claim train-gpu-" in verdict["message"]
    assert f'Unhealthy for container main: "{ECC}"' in verdict["message"]


@pytest.mark.parametrize("health", ["Healthy", "Unknown"])
def test_healthy_and_unknown_devices_are_no_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], health: str
) -> None:
    status = b.resource_health("gpu", None, [(b.GPU_DRIVER, NODE, "gpu-1")], health, "plugin re-registering")
    import_objects(tmp_path, platform(*running(allocated_resources_status=[status])))
    doc = cli_json(capsys, "explain", f"{NS}/train")
    assert doc["verdict"]["reason"] == "ok"
    shown = [e for e in doc["claims"][0]["boundaries"]["runtime"]["evidence"] if e.get("kind") == "ResourceHealth"]
    assert [(e["health"], e["message"]) for e in shown] == [(health, "plugin re-registering")]


def test_another_claims_unhealthy_entry_is_not_this_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "claim:gpu-extra" is not "claim:gpu": the exact name form must not match by prefix.
    health = b.resource_health("gpu-extra", None, [(b.GPU_DRIVER, NODE, "gpu-2")], "Unhealthy", ECC)
    verdict = explain_verdict(tmp_path, capsys, platform(*running(allocated_resources_status=[health])), f"{NS}/train")
    assert verdict["reason"] == "ok", verdict
