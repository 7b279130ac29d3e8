"""explain(): one scenario per verdict reason, incarnations, history, and the JSON shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo import builders as b
from demo.story import DEMO_BASE, DEMO_EXPECTATIONS, demo_snapshots, stage_times
from domain.cluster.state import MemoryHistory
from domain.verdicts.explain import PodNotFound, explain

NS = "ml"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = T0 - timedelta(days=30)
S = timedelta(seconds=1)
M = timedelta(minutes=1)
MEM = "device.capacity['gpu.nvidia.com'].memory"
ATTR = "device.attributes['gpu.nvidia.com']"
UNSCHEDULABLE = "0/2 nodes are available: 2 cannot allocate all claims."

Obj = dict[str, Any]


def gpu_nodes(*specs: tuple[str, int], model: dict[str, str] | None = None, **kwargs: Any) -> list[Obj]:
    out: list[Obj] = []
    for name, count in specs:
        out += [
            b.node(name, CREATED),
            b.resource_slice(name, b.gpu_devices(name, count, model or b.A100_40GB, **kwargs), created=CREATED),
        ]
    return out


def platform(*extra: Obj, nodes: list[Obj] | None = None) -> list[Obj]:
    return [b.namespace(NS), b.device_class(), *(gpu_nodes(("worker-0", 4)) if nodes is None else nodes), *extra]


def unscheduled(name: str, tpl: Obj, pod_claim: str = "gpu", **kwargs: Any) -> tuple[Obj, Obj]:
    """A pod the scheduler could not place, with its generated (pending) claim."""
    created = T0 - 10 * M
    pod = b.pod(
        NS,
        name,
        created,
        claims=[(pod_claim, {"template": tpl["metadata"]["name"]})],
        conditions=[b.unschedulable(created + S, UNSCHEDULABLE)],
        **kwargs,
    )
    return pod, b.template_claim(tpl, pod)


def verdict(objects: list[Obj], name: str, **kwargs: Any) -> dict[str, Any]:
    out = explain(MemoryHistory([(T0, objects)]), NS, name, **kwargs)
    return out["verdict"]


def running_pod(name: str, node: str, device: str, created: datetime, **kwargs: Any) -> tuple[Obj, Obj]:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    sched, started = created + S, created + M
    pod = b.pod(
        NS,
        name,
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name=node,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
        **kwargs,
    )
    claim = b.template_claim(tpl, pod, allocated=[("gpu", node, device)], allocated_at=sched, reserved_for=[pod])
    return pod, claim


# --- allocation: missing objects -------------------------------------------------------------------


def test_claim_missing_for_a_direct_claim() -> None:
    pod = b.pod(NS, "train", T0 - M, claims=[("gpu", {"claim": "shared-gpu"})])
    v = verdict(platform(pod), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "claim-missing")
    assert v["message"] == "the Pod references ResourceClaim ml/shared-gpu (pod claim gpu), which does not exist"


def test_claim_missing_for_a_generated_claim_named_in_the_pod_status() -> None:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(NS, "train", T0 - M, claims=[("gpu", {"template": "one-gpu"})])  # status names the claim
    v = verdict(platform(tpl, pod), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "claim-missing")
    assert "status.resourceClaimStatuses" in v["message"] and "train-gpu-" in v["message"]


def test_claim_missing_when_no_claim_was_generated() -> None:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(NS, "train", T0 - M, claims=[("gpu", {"template": "one-gpu"})], claim_statuses=[])
    v = verdict(platform(tpl, pod), "train")
    assert v["reason"] == "claim-missing"
    assert v["message"].startswith("no ResourceClaim was generated from template ml/one-gpu")


def test_template_missing() -> None:
    pod = b.pod(NS, "train", T0 - M, claims=[("gpu", {"template": "eight-gpus"})], claim_statuses=[])
    v = verdict(platform(pod), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "template-missing")
    assert v["message"] == "the Pod's claim gpu uses ResourceClaimTemplate ml/eight-gpus, which does not exist"


def test_device_class_missing() -> None:
    tpl = b.claim_template(NS, "t", [b.request(device_class="gpu.nvidia.con")])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "device-class-missing")
    assert "names DeviceClass gpu.nvidia.con, which does not exist (classes: gpu.nvidia.com)" in v["message"]


def test_device_class_missing_in_a_later_subrequest_still_blocks() -> None:
    req = b.first_available_request("gpu", [b.subrequest("a"), b.subrequest("b", device_class="gone")])
    tpl = b.claim_template(NS, "t", [req])
    pod, claim = unscheduled("train", tpl)
    assert verdict(platform(tpl, pod, claim), "train")["reason"] == "device-class-missing"


# --- inventory and the allocation simulation -------------------------------------------------------


def test_no_inventory() -> None:
    tpl = b.claim_template(NS, "t", [b.request()])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim, nodes=[b.node("cpu-0", CREATED)]), "train")
    assert (v["boundary"], v["reason"]) == ("inventory", "no-inventory")
    assert v["message"].startswith("no ResourceSlice advertises any device of driver gpu.nvidia.com (request gpu)")


def test_no_inventory_when_only_another_driver_advertises() -> None:
    tpl = b.claim_template(NS, "t", [b.request()])
    pod, claim = unscheduled("train", tpl)
    nics = b.resource_slice("worker-0", [{"name": "nic-0"}], driver="rdma.example.com")
    v = verdict(platform(tpl, pod, claim, nics, nodes=[b.node("worker-0", CREATED)]), "train")
    assert v["reason"] == "no-inventory"


def test_selector_unsatisfiable_says_how_many_devices_and_why() -> None:
    tpl = b.claim_template(NS, "big", [b.request(selectors=[f"{MEM}.compareTo(quantity('40Gi')) > 0"])])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim, nodes=gpu_nodes(("a-0", 4), ("a-1", 4))), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "selector-unsatisfiable")
    assert v["message"] == (
        "no device satisfies request gpu: 8 devices of class gpu.nvidia.com checked, all 8 have memory 40Gi, "
        "which the request selector `device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0` "
        "rejects"
    )


def test_selector_unsatisfiable_through_every_first_available_subrequest() -> None:
    req = b.first_available_request(
        "gpu",
        [
            b.subrequest("h100", selectors=[f"{ATTR}.productName == 'NVIDIA H100 80GB HBM3'"]),
            b.subrequest("cc9", selectors=[f"{ATTR}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0"]),
        ],
    )
    tpl = b.claim_template(NS, "t", [req])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim), "train")
    assert v["reason"] == "selector-unsatisfiable"
    assert "subrequest h100:" in v["message"] and "subrequest cc9:" in v["message"]
    assert "cudaComputeCapability 8.0.0" in v["message"]


def test_insufficient_devices_spread_over_nodes() -> None:
    tpl = b.claim_template(NS, "four", [b.request(count=4)])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim, nodes=gpu_nodes(("a-0", 2), ("a-1", 3), ("a-2", 2))), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "insufficient-devices")
    assert "7 devices match in the cluster, but at most 3 are on one node (a-1: 3, a-0: 2, a-2: 2)" in v["message"]


def test_insufficient_when_another_claim_pins_the_pod_to_a_node() -> None:
    # One claim is already allocated on a-0; the second only fits on a-1.
    first_tpl = b.claim_template(NS, "one", [b.request()])
    second_tpl = b.claim_template(NS, "two", [b.request("gpu", count=2)])
    created = T0 - 10 * M
    pod = b.pod(
        NS,
        "train",
        created,
        claims=[("first", {"template": "one"}), ("second", {"template": "two"})],
        conditions=[b.unschedulable(created + S, UNSCHEDULABLE)],
    )
    first = b.template_claim(first_tpl, pod, pod_claim_name="first", allocated=[("gpu", "a-0", "gpu-0")])
    second = b.template_claim(second_tpl, pod, pod_claim_name="second")
    nodes = gpu_nodes(("a-0", 2), ("a-1", 2))
    v = verdict(platform(first_tpl, second_tpl, pod, first, second, nodes=nodes), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "insufficient-devices")
    assert (
        "already take 1 of the 2 matching devices on a-0 (its allocated claims pin it there), leaving 1"
        in (v["message"])
    )


def test_devices_in_use_names_the_holding_claims() -> None:
    tpl = b.claim_template(NS, "four", [b.request(count=4)])
    pod, claim = unscheduled("train", tpl)
    holder = b.claim(NS, "notebook-gpu", [b.request()], CREATED, allocated=[("gpu", "worker-0", "gpu-2")])
    v = verdict(platform(tpl, pod, claim, holder), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "devices-in-use")
    assert v["message"].endswith("but 1 of them are allocated to other claims: ml/notebook-gpu (1)")


def test_selector_unsatisfiable_with_quantities_in_other_units() -> None:
    devices = [b.gpu_device(f"gpu-{i}", memory="81920Mi" if i % 2 else "80Gi") for i in range(4)]
    nodes = [b.node("h-0", CREATED), b.resource_slice("h-0", devices)]
    tpl = b.claim_template(NS, "big", [b.request(selectors=[f"{MEM}.compareTo(quantity('80Gi')) > 0"])])
    pod, claim = unscheduled("train", tpl)
    v = verdict(platform(tpl, pod, claim, nodes=nodes), "train")
    assert v["reason"] == "selector-unsatisfiable"
    assert "4 devices of class gpu.nvidia.com checked, all 4 have memory" in v["message"]
    at_least = b.claim_template(NS, "big", [b.request(selectors=[f"{MEM}.compareTo(quantity('80Gi')) >= 0"])])
    pod, claim = unscheduled("train", at_least)
    assert verdict(platform(at_least, pod, claim, nodes=nodes), "train")["reason"] == "waiting-for-scheduler"


def test_a_shared_claim_allocated_for_others_waits_for_the_scheduler() -> None:
    holder = b.pod(NS, "other", T0 - 60 * M, claims=[("gpu", {"claim": "shared"})], node_name="worker-0")
    shared = b.claim(
        NS, "shared", [b.request()], CREATED, allocated=[("gpu", "worker-0", "gpu-0")], reserved_for=[holder]
    )
    created = T0 - 5 * M
    pod = b.pod(
        NS,
        "train",
        created,
        claims=[("gpu", {"claim": "shared"})],
        conditions=[b.unschedulable(created + S, "0/1 nodes are available: 1 Insufficient cpu.")],
    )
    v = verdict(platform(holder, shared, pod), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "waiting-for-scheduler")
    assert v["message"] == (
        "claim shared is allocated (gpu-0 on worker-0) but not reserved for this Pod, which is not scheduled yet: "
        "0/1 nodes are available: 1 Insufficient cpu."
    )


def test_a_failed_pod_is_not_blocked() -> None:
    created = T0 - 60 * M
    sched, started = created + S, created + M
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(
        NS,
        "job",
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name="worker-0",
        phase="Failed",
        container_state=b.state_terminated(started, started + M, exit_code=2),
        restart_policy="Never",
    )
    claim = b.template_claim(tpl, pod, allocated=[("gpu", "worker-0", "gpu-0")], allocated_at=sched)
    v = verdict(platform(tpl, pod, claim), "job")
    assert (v["boundary"], v["reason"]) == (None, "ok")
    assert v["message"].startswith("the Pod Failed after its containers ran")


def test_devices_tainted() -> None:
    tpl = b.claim_template(NS, "one", [b.request()])
    pod, claim = unscheduled("train", tpl)
    nodes = gpu_nodes(("worker-0", 2), taints=[b.taint("nvidia.com/unhealthy", "NoExecute", "xid-79")])
    v = verdict(platform(tpl, pod, claim, nodes=nodes), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "devices-tainted")
    assert "nvidia.com/unhealthy=xid-79:NoExecute (2)" in v["message"]


def test_taint_effect_none_does_not_block_and_tolerations_do_unblock() -> None:
    informational = gpu_nodes(("worker-0", 2), taints=[b.taint("nvidia.com/note", "None")])
    tpl = b.claim_template(NS, "one", [b.request()])
    pod, claim = unscheduled("train", tpl)
    assert verdict(platform(tpl, pod, claim, nodes=informational), "train")["reason"] == "waiting-for-scheduler"
    blocking = gpu_nodes(("worker-0", 2), taints=[b.taint("nvidia.com/maint", "NoSchedule")])
    tolerant = b.claim_template(NS, "one", [b.request(tolerations=[b.toleration("nvidia.com/maint", "Exists")])])
    pod, claim = unscheduled("train", tolerant)
    assert verdict(platform(tolerant, pod, claim, nodes=blocking), "train")["reason"] == "waiting-for-scheduler"


def test_scheduler_bypassed() -> None:
    tpl = b.claim_template(NS, "one", [b.request()])
    pod = b.pod(NS, "train", T0 - 5 * M, claims=[("gpu", {"template": "one"})], node_name="worker-0")
    claim = b.template_claim(tpl, pod)
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "scheduler-bypassed")
    assert v["message"].startswith("the Pod was created with spec.nodeName worker-0")


def test_waiting_for_scheduler_when_nothing_explains_it_yet() -> None:
    tpl = b.claim_template(NS, "one", [b.request()])
    pod = b.pod(NS, "train", T0 - 2 * S, claims=[("gpu", {"template": "one"})])
    claim = b.template_claim(tpl, pod)
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("allocation", "waiting-for-scheduler")
    assert "fit on worker-0 (gpu.nvidia.com/worker-0/gpu-0)" in v["message"]
    assert v["message"].endswith("the scheduler has not reported on the Pod yet")


def test_waiting_for_scheduler_quotes_the_scheduler_when_our_simulation_finds_room() -> None:
    tpl = b.claim_template(NS, "one", [b.request()])
    pod, claim = unscheduled("train", tpl)
    ev = b.event(
        pod,
        "FailedScheduling",
        "0/1 nodes are available: 1 Insufficient cpu.",
        T0 - 9 * M,
        T0 - M,
        count=5,
        component="default-scheduler",
    )
    v = verdict(platform(tpl, pod, claim, ev), "train")
    assert v["reason"] == "waiting-for-scheduler"
    assert '"0/1 nodes are available: 1 Insufficient cpu." 5 times since 2026-11-20T11:51:00Z' in v["message"]


# --- preparation and runtime -----------------------------------------------------------------------


def prepared_on(node: str, created: datetime, sandbox: bool, **kwargs: Any) -> tuple[Obj, Obj, Obj]:
    tpl = b.claim_template(NS, "one", [b.request()])
    sched = created + S
    pod = b.pod(
        NS,
        "train",
        created,
        claims=[("gpu", {"template": "one"})],
        node_name=node,
        conditions=b.stuck_conditions(sched, sandbox_ready=sandbox),
        **kwargs,
    )
    claim = b.template_claim(tpl, pod, allocated=[("gpu", node, "gpu-3")], allocated_at=sched, reserved_for=[pod])
    return tpl, pod, claim


def test_preparation_failed_when_the_driver_is_not_registered() -> None:
    tpl, pod, claim = prepared_on("worker-0", T0 - 10 * M, sandbox=False)
    ev = b.event(
        pod,
        "FailedPrepareDynamicResources",
        "Failed to prepare dynamic resources: DRA driver gpu.nvidia.com is not registered",
        T0 - 10 * M + 2 * S,
        T0 - 30 * S,
        count=14,
    )
    v = verdict(platform(tpl, pod, claim, ev), "train")
    assert (v["boundary"], v["reason"]) == ("preparation", "preparation-failed")
    assert v["message"].startswith(f"kubelet on worker-0 failed to prepare claim {claim['metadata']['name']} 14 times")
    assert v["message"].endswith("DRA driver gpu.nvidia.com is not registered")


def test_preparation_pending_without_errors() -> None:
    tpl, pod, claim = prepared_on("worker-0", T0 - 20 * S, sandbox=False)
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("preparation", "preparation-pending")


def test_runtime_injection_failed_on_unresolvable_cdi_devices() -> None:
    message = "failed to create containerd container: failed to inject CDI devices: unresolvable CDI devices x"
    tpl, pod, claim = prepared_on(
        "worker-0", T0 - 10 * M, sandbox=True, container_state=b.state_waiting("CreateContainerError", message)
    )
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("runtime", "runtime-injection-failed")
    assert "(CreateContainerError)" in v["message"] and "unresolvable CDI devices" in v["message"]


def test_a_create_container_error_not_about_devices_is_not_an_injection_failure() -> None:
    tpl, pod, claim = prepared_on(
        "worker-0",
        T0 - 10 * M,
        sandbox=True,
        container_state=b.state_waiting("CreateContainerConfigError", 'configmap "train-env" not found'),
    )
    v = verdict(platform(tpl, pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("runtime", "runtime-pending")
    assert 'configmap "train-env" not found' in v["message"]


def test_runtime_injection_failed_when_the_container_sees_another_gpu() -> None:
    pod, claim = running_pod("train", "worker-0", "gpu-1", T0 - 60 * M)
    objects = platform(b.claim_template(NS, "one-gpu", [b.request()]), pod, claim)
    wrong = b.gpu_devices("worker-0", 4)[0]["attributes"]["uuid"]["string"]
    v = verdict(objects, "train", observed_uuids={"main": wrong})
    assert (v["boundary"], v["reason"]) == ("runtime", "runtime-injection-failed")
    assert v["message"].startswith(f"container main sees GPU {wrong}")
    right = b.gpu_devices("worker-0", 4)[1]["attributes"]["uuid"]["string"]
    assert verdict(objects, "train", observed_uuids={"main": right})["reason"] == "ok"


def test_device_unhealthy_on_unhealthy_device() -> None:
    health = b.resource_health("gpu", "gpu", [(b.GPU_DRIVER, "worker-0", "gpu-1")], health="Unhealthy")
    pod, claim = running_pod("train", "worker-0", "gpu-1", T0 - 60 * M, allocated_resources_status=[health])
    v = verdict(platform(b.claim_template(NS, "one-gpu", [b.request()]), pod, claim), "train")
    assert (v["boundary"], v["reason"]) == ("runtime", "device-unhealthy")


# --- ok --------------------------------------------------------------------------------------------


def test_ok_when_all_four_hold() -> None:
    pod, claim = running_pod("train", "worker-0", "gpu-1", T0 - 60 * M)
    out = explain(
        MemoryHistory([(T0, platform(b.claim_template(NS, "one-gpu", [b.request()]), pod, claim))]), NS, "train"
    )
    assert out["verdict"]["boundary"] is None and out["verdict"]["reason"] == "ok"
    assert "worker-0/gpu-1 on worker-0" in out["verdict"]["message"]


def test_a_succeeded_pod_whose_claim_was_cleaned_up_is_ok() -> None:
    created = T0 - 3 * 60 * M
    sched, started, finished = created + S, created + M, created + 90 * M
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(
        NS,
        "job",
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name="worker-0",
        phase="Succeeded",
        conditions=b.completed_conditions(sched, finished),
        container_state=b.state_terminated(started, finished),
        restart_policy="Never",
    )
    claim = b.template_claim(tpl, pod, allocated=[("gpu", "worker-0", "gpu-0")], allocated_at=sched, reserved_for=[pod])
    history = MemoryHistory([(finished, platform(tpl, pod, claim)), (T0, platform(tpl, pod))])
    v = explain(history, NS, "job")["verdict"]
    assert (v["boundary"], v["reason"]) == (None, "ok")
    assert v["message"].startswith("the Pod ran to completion")


def test_a_pod_without_claims_is_ok() -> None:
    pod = b.pod(
        NS, "web", T0 - M, claims=[], node_name="worker-0", phase="Running", container_state=b.state_running(T0 - M)
    )
    assert verdict(platform(pod), "web") == {
        "boundary": None,
        "reason": "ok",
        "message": "the Pod uses no resource claims",
    }


def test_first_available_allocated_on_the_second_subrequest_is_ok() -> None:
    req = b.first_available_request(
        "gpu", [b.subrequest("h100", selectors=[f"{ATTR}.architecture == 'Hopper'"]), b.subrequest("a100")]
    )
    tpl = b.claim_template(NS, "either", [req])
    created, sched, started = T0 - 30 * M, T0 - 29 * M, T0 - 28 * M
    pod = b.pod(
        NS,
        "sweep",
        created,
        claims=[("gpu", {"template": "either"})],
        node_name="worker-0",
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
    )
    claim = b.template_claim(
        tpl, pod, allocated=[("gpu/a100", "worker-0", "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    out = explain(MemoryHistory([(T0, platform(tpl, pod, claim))]), NS, "sweep")
    assert out["verdict"]["reason"] == "ok"
    assert out["claims"][0]["devices"] == [
        {"request": "gpu/a100", "driver": "gpu.nvidia.com", "pool": "worker-0", "device": "gpu-0"}
    ]


# --- incarnations, history, shape ------------------------------------------------------------------


def test_incarnations_latest_by_default_and_earlier_ones_by_uid() -> None:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    old, old_claim = running_pod("nb-0", "worker-0", "gpu-0", T0 - 5 * 60 * M)
    new = b.pod(NS, "nb-0", T0 - 2 * M, claims=[("gpu", {"template": "one-gpu"})], incarnation=1)
    new_claim = b.template_claim(tpl, new)
    history = MemoryHistory(
        [
            (T0 - 60 * M, platform(tpl, old, old_claim)),
            (T0, platform(tpl, new, new_claim)),
        ]
    )
    out = explain(history, NS, "nb-0")
    assert [i["uid"] for i in out["incarnations"]] == [old["metadata"]["uid"], new["metadata"]["uid"]]
    assert out["incarnations"][0]["deleted"] == "2026-11-20T12:00:00Z"
    assert out["incarnations"][1] == {"uid": new["metadata"]["uid"], "created": b.ts(T0 - 2 * M), "deleted": None}
    assert out["pod"]["uid"] == new["metadata"]["uid"]
    assert out["verdict"]["reason"] == "waiting-for-scheduler"
    assert out["claims"][0]["uid"] == new_claim["metadata"]["uid"]
    earlier = explain(history, NS, "nb-0", pod_uid=old["metadata"]["uid"])
    assert earlier["pod"]["deleted"] == "2026-11-20T12:00:00Z"
    assert earlier["verdict"]["reason"] == "ok"  # as it last was: running, its claim gone with it
    assert earlier["verdict"]["message"].startswith("the Pod was deleted at 2026-11-20T12:00:00Z; until then ")
    assert earlier["claims"][0]["uid"] == old_claim["metadata"]["uid"]


def test_unknown_pods_and_uids_raise_pod_not_found() -> None:
    history = MemoryHistory([(T0, platform())])
    with pytest.raises(PodNotFound, match="no Pod ml/ghost"):
        explain(history, NS, "ghost")
    pod = b.pod(NS, "real", T0 - M, claims=[])
    with pytest.raises(PodNotFound, match="never had UID"):
        explain(MemoryHistory([(T0, platform(pod))]), NS, "real", pod_uid="nope")


def test_as_of_an_earlier_snapshot_gives_the_verdict_of_that_time() -> None:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pending = b.pod(NS, "train", T0 - 30 * M, claims=[("gpu", {"template": "one-gpu"})])
    pending_claim = b.template_claim(tpl, pending)
    pod, claim = running_pod("train", "worker-0", "gpu-0", T0 - 30 * M)
    snaps = [(T0 - 20 * M, platform(tpl, pending, pending_claim)), (T0, platform(tpl, pod, claim))]
    assert explain(MemoryHistory(snaps), NS, "train")["verdict"]["reason"] == "ok"
    then = explain(MemoryHistory(snaps, as_of=T0 - 10 * M), NS, "train")
    assert then["verdict"]["reason"] == "waiting-for-scheduler"
    assert then["as_of"] == "2026-11-20T11:50:00Z"


def test_explain_json_shape() -> None:
    tpl, pod, claim = prepared_on("worker-0", T0 - 10 * M, sandbox=False)
    out = explain(MemoryHistory([(T0, platform(tpl, pod, claim))]), NS, "train")
    assert {"pod", "incarnations", "claims", "verdict"} <= set(out)
    assert {"namespace", "name", "uid"} <= set(out["pod"])
    assert {"uid", "created"} <= set(out["incarnations"][0])
    (c,) = out["claims"]
    assert {"uid", "name", "boundaries"} <= set(c)
    assert list(c["boundaries"]) == ["inventory", "allocation", "preparation", "runtime"]
    for boundary in c["boundaries"].values():
        assert {"state", "since", "evidence"} <= set(boundary)
        assert boundary["state"] in ("ok", "pending", "failed", "unknown")
    assert set(out["verdict"]) == {"boundary", "reason", "message"}
    assert all({"at", "what", "source"} <= set(e) for e in out["timeline"])


# --- the bundled demo cluster ----------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(DEMO_EXPECTATIONS["pods"]))
def test_demo_story_verdicts(key: str) -> None:
    history = MemoryHistory(demo_snapshots(DEMO_BASE))
    namespace, name = key.split("/")
    out = explain(history, namespace, name)
    assert (out["verdict"]["boundary"], out["verdict"]["reason"]) == DEMO_EXPECTATIONS["pods"][key]
    assert len(out["incarnations"]) == DEMO_EXPECTATIONS["incarnations"][key]


def test_demo_story_earlier_stages() -> None:
    snapshots = demo_snapshots(DEMO_BASE)
    for stage, pods in DEMO_EXPECTATIONS["stages"].items():
        history = MemoryHistory(snapshots, as_of=stage_times(DEMO_BASE)[stage])
        for key, expected in pods.items():
            namespace, name = key.split("/")
            v = explain(history, namespace, name)["verdict"]
            assert (v["boundary"], v["reason"]) == expected, (stage, key, v["message"])


def test_a_deleted_incarnation_is_judged_against_the_cluster_it_lived_in() -> None:
    from datetime import UTC, datetime, timedelta

    from demo import builders as bb
    from domain.cluster.state import MemoryHistory
    from domain.verdicts.explain import explain

    t0 = datetime(2026, 11, 20, 12, tzinfo=UTC)
    base = [bb.device_class(), bb.node("n0", t0 - timedelta(days=9)),
            bb.resource_slice("n0", bb.gpu_devices("n0", 1), created=t0 - timedelta(days=9))]
    holder_pod = bb.pod("a", "holder", t0, claims=[("gpu", {"claim": "held"})], node_name="n0", phase="Running")
    holder = bb.claim("a", "held", [bb.request()], t0, allocated=[("gpu", "n0", "gpu-0")], allocated_at=t0,
                      reserved_for=[holder_pod])
    waiting = bb.pod("b", "waiting", t0, claims=[("gpu", {"claim": "wanted"})],
                     conditions=[bb.unschedulable(t0, "0/1 nodes are available: 1 cannot allocate all claims.")])
    wanted = bb.claim("b", "wanted", [bb.request()], t0)
    history = MemoryHistory([
        (t0 + timedelta(minutes=5), [*base, holder_pod, holder, waiting, wanted]),
        # Later the holder is gone and so is the waiting Pod: today the GPU is free.
        (t0 + timedelta(hours=2), [*base]),
    ])
    doc = explain(history, "b", "waiting")
    assert doc["pod"]["deleted"]
    assert doc["verdict"]["reason"] == "devices-in-use", doc["verdict"]["message"]
    assert "a/held" in doc["verdict"]["message"]
