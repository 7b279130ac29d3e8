"""Per-claim boundaries from their own evidence, and the timeline with the timestamps it used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from demo import builders as b
from domain.boundaries.judgement import FAILED, OK, PENDING, UNKNOWN, ClaimLifecycle, related_events
from domain.boundaries.lifecycle import claim_lifecycles
from domain.cluster.pod_claims import resolve_pod_claims
from domain.cluster.state import MemoryHistory
from domain.verdicts.timeline import timeline

NS = "ml"
NODE = "worker-0"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = T0 - timedelta(days=30)
S = timedelta(seconds=1)
M = timedelta(minutes=1)

Obj = dict[str, Any]


def platform() -> list[Obj]:
    return [
        b.namespace(NS),
        b.device_class(),
        b.node(NODE, CREATED),
        b.resource_slice(NODE, b.gpu_devices(NODE, 4), created=CREATED),
        b.claim_template(NS, "gpu", [b.request()]),
    ]


def template() -> Obj:
    return b.claim_template(NS, "gpu", [b.request()])


def lifecycles_at(snapshots: list[tuple[datetime, list[Obj]]], pod: Obj, **kwargs: Any) -> list[ClaimLifecycle]:
    history = MemoryHistory(snapshots)
    return claim_lifecycles(history, history.state.get("Pod", pod["metadata"]["uid"]) or pod, **kwargs)


def states(lc: ClaimLifecycle) -> dict[str, str]:
    return {name: boundary.state for name, boundary in lc.boundaries.items()}


def running(created: datetime, **kwargs: Any) -> tuple[Obj, Obj]:
    """A running pod on NODE with its generated claim allocated gpu-1."""
    sched, started = created + 5 * S, created + M
    pod = b.pod(
        NS,
        "train",
        created,
        node_name=NODE,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
        **kwargs,
    )
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-1")], allocated_at=sched, reserved_for=[pod]
    )
    return pod, claim


def test_a_running_pod_holds_every_boundary_with_since_from_object_timestamps() -> None:
    created = T0 - 2 * 60 * M
    pod, claim = running(created)
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    assert states(lc) == {"inventory": OK, "allocation": OK, "preparation": OK, "runtime": OK}
    assert lc.boundaries["inventory"].since == b.ts(CREATED)
    assert lc.boundaries["allocation"].since == b.ts(created + 5 * S)
    assert lc.boundaries["preparation"].since == b.ts(created + M)
    assert lc.boundaries["runtime"].since == b.ts(created + M)
    result = next(e for e in lc.boundaries["allocation"].evidence if e["kind"] == "AllocationResult")
    assert result["claim"] == claim["metadata"]["uid"]
    assert (result["node"], result["pool"], result["device"]) == (NODE, NODE, "gpu-1")
    assert result["uuid"].startswith("GPU-")
    assert lc.node == NODE and [d.device for d in lc.devices] == ["gpu-1"]


def test_a_claim_pending_then_allocated_shows_both_in_the_timeline() -> None:
    created = T0 - 20 * M
    tpl = template()
    pending_pod = b.pod(NS, "train", created, conditions=[b.unschedulable(created + S, "0/1 nodes are available")])
    pending_claim = b.template_claim(tpl, pending_pod)
    sched, started = T0 - 5 * M, T0 - 4 * M
    pod = b.pod(
        NS,
        "train",
        created,
        node_name=NODE,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
    )
    claim = b.template_claim(tpl, pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod])
    history = MemoryHistory([(T0 - 10 * M, [*platform(), pending_pod, pending_claim]), (T0, [*platform(), pod, claim])])
    lcs = claim_lifecycles(history, pod)
    assert states(lcs[0])["allocation"] == OK
    entries = timeline(history, pod, lcs)
    whats = [(e["what"], e["source"]) for e in entries]
    assert ("Pod created", "Pod.metadata.creationTimestamp") in whats
    assert any(w.startswith("PodScheduled=False (Unschedulable)") for w, _ in whats)
    assert (
        f"claim {claim['metadata']['name']} allocated {NODE}/gpu-0 on {NODE}",
        "ResourceClaim.status.allocation.allocationTimestamp",
    ) in whats
    assert ("PodScheduled=True", "Pod.status.conditions[PodScheduled].lastTransitionTime") in whats
    assert ("container main started", "Pod.status.containerStatuses[main].state.running.startedAt") in whats
    times = [e["at"] for e in entries]
    assert times == sorted(times)
    # The earlier pending state is still there, as of an earlier time.
    earlier = MemoryHistory(
        [(T0 - 10 * M, [*platform(), pending_pod, pending_claim]), (T0, [*platform(), pod, claim])], as_of=T0 - 9 * M
    )
    (before,) = claim_lifecycles(earlier, earlier.state.get("Pod", pod["metadata"]["uid"]) or pod)
    assert before.boundaries["allocation"].state != OK


def test_allocation_without_allocation_timestamp_uses_the_snapshot_and_says_so() -> None:
    created = T0 - 20 * M
    pod, claim = running(created)
    del claim["status"]["allocation"]["allocationTimestamp"]
    history = MemoryHistory([(T0, [*platform(), pod, claim])])
    lcs = claim_lifecycles(history, pod)
    assert lcs[0].boundaries["allocation"].since == "2026-11-20T12:00:00Z"
    allocated = [e for e in timeline(history, pod, lcs) if " allocated " in e["what"]]
    assert [e["source"] for e in allocated] == ["snapshot"]


def test_preparation_pending_while_container_creating_without_errors() -> None:
    created = T0 - 2 * M
    sched = created + S
    pod = b.pod(NS, "train", created, node_name=NODE, conditions=b.stuck_conditions(sched, sandbox_ready=False))
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    assert states(lc) == {"inventory": OK, "allocation": OK, "preparation": PENDING, "runtime": PENDING}
    assert lc.boundaries["preparation"].since == b.ts(sched)
    assert lc.boundaries["preparation"].reason is None


def test_preparation_failed_from_driver_reported_device_conditions() -> None:
    created = T0 - 10 * M
    sched = created + S
    pod = b.pod(NS, "train", created, node_name=NODE, conditions=b.stuck_conditions(sched, sandbox_ready=False))
    broken = b.condition("Ready", False, created + M, "DeviceNotFound", "GPU fell off the bus (Xid 79)")
    claim = b.template_claim(
        template(),
        pod,
        allocated=[("gpu", NODE, "gpu-0")],
        allocated_at=sched,
        reserved_for=[pod],
        device_conditions=[(NODE, "gpu-0", [broken])],
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    prep = lc.boundaries["preparation"]
    assert prep.state == FAILED and prep.reason == "preparation-failed"
    assert prep.since == b.ts(created + M)
    assert "Ready=False" in (prep.message or "") and "Xid 79" in (prep.message or "")


def test_preparation_that_recovered_is_ok() -> None:
    created = T0 - 10 * M
    pod, claim = running(created)
    ev = b.event(
        pod,
        "FailedPrepareDynamicResources",
        "NodePrepareResources: plugin not registered",
        created + 6 * S,
        created + 30 * S,
        count=3,
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim, ev])], pod)
    prep = lc.boundaries["preparation"]
    assert prep.state == OK
    assert any(e["kind"] == "Event" and e["count"] == 3 for e in prep.evidence)


def test_expired_events_still_count() -> None:
    created = T0 - 3 * 60 * M
    sched = created + S
    pod = b.pod(NS, "train", created, node_name=NODE, conditions=b.stuck_conditions(sched, sandbox_ready=False))
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    ev = b.event(pod, "FailedPrepareDynamicResources", "rpc error: DeadlineExceeded", created + 2 * S, count=1)
    snapshots = [(T0 - 2 * 60 * M, [*platform(), pod, claim, ev]), (T0, [*platform(), pod, claim])]
    (lc,) = lifecycles_at(snapshots, pod)
    assert lc.boundaries["preparation"].state == FAILED


def test_events_of_an_earlier_incarnation_do_not_count() -> None:
    old = b.pod(NS, "train", T0 - 60 * M, node_name=NODE)
    new = b.pod(NS, "train", T0 - 5 * M, node_name=NODE, incarnation=1)
    old_event = b.event(old, "FailedPrepareDynamicResources", "boom", T0 - 59 * M)
    new_event = b.event(new, "FailedScheduling", "later", T0 - 4 * M, component="default-scheduler")
    history = MemoryHistory([(T0, [old, new, old_event, new_event])])
    assert [e["reason"] for e in related_events(history, new)] == ["FailedScheduling"]


def test_runtime_failed_when_kubelet_reports_the_device_unhealthy() -> None:
    created = T0 - 30 * M
    health = b.resource_health("gpu", "gpu", [(b.GPU_DRIVER, NODE, "gpu-1")], health="Unhealthy")
    pod, claim = running(created, allocated_resources_status=[health])
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    rt = lc.boundaries["runtime"]
    assert rt.state == FAILED and rt.reason == "device-unhealthy"
    assert "gpu.nvidia.com/worker-0/gpu-1" in (rt.message or "") and "Unhealthy" in (rt.message or "")


def test_runtime_failed_on_a_cdi_error_in_the_last_run() -> None:
    created = T0 - 30 * M
    sched = created + S
    message = "failed to create task: failed to inject CDI devices: unresolvable CDI devices k8s.gpu.nvidia.com/claim=x"
    pod = b.pod(
        NS,
        "train",
        created,
        node_name=NODE,
        conditions=b.stuck_conditions(sched, sandbox_ready=True),
        container_state=b.state_waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container"),
        last_state={
            "terminated": {
                "exitCode": 128,
                "reason": "StartError",
                "message": message,
                "startedAt": "1970-01-01T00:00:00Z",
                "finishedAt": b.ts(T0 - M),
            }
        },
        restart_count=6,
    )
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    assert lc.boundaries["preparation"].state == OK
    rt = lc.boundaries["runtime"]
    assert rt.state == FAILED and "StartError" in (rt.message or "") and "CDI" in (rt.message or "")


def test_runtime_ok_after_a_crash_that_followed_a_start() -> None:
    created = T0 - 30 * M
    sched, started = created + S, created + M
    pod = b.pod(
        NS,
        "train",
        created,
        node_name=NODE,
        phase="Running",
        conditions=b.stuck_conditions(sched, True),
        container_state=b.state_waiting("CrashLoopBackOff", "back-off"),
        last_state=b.state_terminated(started, started + M, exit_code=1),
        restart_count=3,
    )
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    assert lc.boundaries["runtime"].state == OK
    assert lc.boundaries["runtime"].since == b.ts(started)


def test_runtime_pending_while_the_image_pulls() -> None:
    created = T0 - 5 * M
    sched = created + S
    pod = b.pod(
        NS,
        "train",
        created,
        node_name=NODE,
        conditions=b.stuck_conditions(sched, True),
        container_state=b.state_waiting("ImagePullBackOff", "Back-off pulling image"),
    )
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod)
    assert lc.boundaries["runtime"].state == PENDING
    assert "ImagePullBackOff" in (lc.boundaries["runtime"].message or "")


def test_identity_evidence_compares_the_observed_uuid() -> None:
    created = T0 - 30 * M
    pod, claim = running(created)
    slice_devices = b.gpu_devices(NODE, 4)
    expected = slice_devices[1]["attributes"]["uuid"]["string"]
    (ok,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod, observed_uuids={"main": expected})
    assert ok.boundaries["runtime"].state == OK
    identity = [e for e in ok.boundaries["runtime"].evidence if e["kind"] == "Identity"]
    assert identity == [
        {"kind": "Identity", "container": "main", "observed": expected, "expected": [expected], "match": True}
    ]
    (bad,) = lifecycles_at([(T0, [*platform(), pod, claim])], pod, observed_uuids={"main": "GPU-other"})
    assert bad.boundaries["runtime"].state == FAILED
    assert "sees GPU GPU-other" in (bad.boundaries["runtime"].message or "")


def test_a_finished_pod_is_judged_by_its_claim_as_last_allocated() -> None:
    created = T0 - 5 * 60 * M
    sched, started, finished = created + S, created + M, created + 60 * M
    pod = b.pod(
        NS,
        "job",
        created,
        node_name=NODE,
        phase="Succeeded",
        restart_policy="Never",
        conditions=b.completed_conditions(sched, finished),
        container_state=b.state_terminated(started, finished),
    )
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-2")], allocated_at=sched, reserved_for=[pod]
    )
    # The resourceclaim controller deletes the generated claim once the pod is done.
    (lc,) = lifecycles_at([(finished, [*platform(), pod, claim]), (T0, [*platform(), pod])], pod)
    assert states(lc) == {"inventory": OK, "allocation": OK, "preparation": OK, "runtime": OK}
    assert lc.pod_claim.gone_at == T0


def test_missing_claims_and_templates_are_allocation_failures() -> None:
    pod = b.pod(
        NS,
        "train",
        T0 - M,
        claims=[("a", {"claim": "nope"}), ("b", {"template": "missing-tpl"}), ("c", {"template": "gpu"})],
        claim_statuses=[{"name": "c", "resourceClaimName": "train-c-zzzzz"}],
    )
    history = MemoryHistory([(T0, [*platform(), pod])])
    pcs = resolve_pod_claims(history, pod)
    assert [(pc.pod_claim_name, pc.problem) for pc in pcs] == [
        ("a", "claim-missing"),
        ("b", "template-missing"),
        ("c", "claim-missing"),
    ]
    lcs = claim_lifecycles(history, pod)
    assert [states(lc)["allocation"] for lc in lcs] == [FAILED] * 3
    assert states(lcs[0])["inventory"] == UNKNOWN


def test_a_generated_claim_is_found_by_owner_before_the_pod_status_names_it() -> None:
    pod = b.pod(NS, "train", T0 - M, claim_statuses=[])
    claim = b.template_claim(template(), pod)
    (pc,) = resolve_pod_claims(MemoryHistory([(T0, [*platform(), pod, claim])]), pod)
    assert pc.problem is None and pc.claim_name == claim["metadata"]["name"]


def test_timeline_counts_repeated_events_with_both_timestamps() -> None:
    created = T0 - 10 * M
    sched = created + S
    pod = b.pod(NS, "train", created, node_name=NODE, conditions=b.stuck_conditions(sched, sandbox_ready=False))
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    ev = b.event(
        pod,
        "FailedPrepareDynamicResources",
        "driver gpu.nvidia.com is not registered",
        created + 2 * S,
        T0 - 10 * S,
        count=9,
    )
    history = MemoryHistory([(T0, [*platform(), pod, claim, ev])])
    entries = timeline(history, pod, claim_lifecycles(history, pod))
    prep = [e for e in entries if e["boundary"] == "preparation" and "FailedPrepare" in e["what"]]
    assert [(e["source"], e["at"]) for e in prep] == [
        ("Event.firstTimestamp", b.ts(created + 2 * S)),
        ("Event.lastTimestamp", b.ts(T0 - 10 * S)),
    ]
    assert "seen 9 times" in prep[1]["what"]
    waiting = [e for e in entries if "waiting (ContainerCreating)" in e["what"]]
    assert [e["source"] for e in waiting] == ["snapshot"]


def test_prepare_failures_naming_one_claim_do_not_fail_the_other() -> None:
    created = T0 - 10 * M
    sched = created + S
    tpl_a = b.claim_template(NS, "a", [b.request()])
    tpl_b = b.claim_template(NS, "b", [b.request()])
    pod = b.pod(
        NS,
        "two",
        created,
        claims=[("a", {"template": "a"}), ("b", {"template": "b"})],
        node_name=NODE,
        conditions=b.stuck_conditions(sched, sandbox_ready=False),
    )
    claim_a = b.template_claim(
        tpl_a, pod, pod_claim_name="a", allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    claim_b = b.template_claim(
        tpl_b, pod, pod_claim_name="b", allocated=[("gpu", NODE, "gpu-1")], allocated_at=sched, reserved_for=[pod]
    )
    message = f"NodePrepareResources failed for ResourceClaim {claim_b['metadata']['name']}: CDI spec write failed"
    ev = b.event(pod, "FailedPrepareDynamicResources", message, created + 2 * S, count=2)
    lcs = lifecycles_at([(T0, [*platform(), tpl_a, tpl_b, pod, claim_a, claim_b, ev])], pod)
    assert [lc.boundaries["preparation"].state for lc in lcs] == [PENDING, FAILED]


def test_runtime_failed_from_kubelet_events_alone() -> None:
    created = T0 - 10 * M
    sched = created + S
    pod = b.pod(NS, "train", created, node_name=NODE, conditions=b.stuck_conditions(sched, sandbox_ready=True))
    claim = b.template_claim(
        template(), pod, allocated=[("gpu", NODE, "gpu-0")], allocated_at=sched, reserved_for=[pod]
    )
    ev = b.event(
        pod,
        "Failed",
        "Error: failed to inject CDI devices: unresolvable CDI devices k8s.gpu.nvidia.com/claim=x",
        created + M,
        T0 - M,
        count=4,
        field_path="spec.containers{main}",
    )
    (lc,) = lifecycles_at([(T0, [*platform(), pod, claim, ev])], pod)
    rt = lc.boundaries["runtime"]
    assert rt.state == FAILED and rt.since == b.ts(created + M)
    assert (rt.message or "").startswith(f"a container cannot be created on {NODE} with claim")
    assert "4x Failed event" in (rt.message or "")
