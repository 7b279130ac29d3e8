"""Retention (leak) reasons: every reason, and the healthy look-alikes that must never be flagged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.reports.leaks import Thresholds, find_leaks, flagged_intervals

NS = "ml"
NODE = "gpu-node-0"
T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def base() -> list[dict[str, Any]]:
    return [
        b.namespace(NS),
        b.node(NODE, T0 - 30 * 24 * H),
        b.resource_slice(NODE, b.gpu_devices(NODE, 8)),
        b.device_class(),
        b.claim_template(NS, "gpu", [b.request()]),
    ]


def direct_pod(name: str, claim_name: str, created: datetime, **kwargs: Any) -> dict[str, Any]:
    return b.pod(NS, name, created, claims=(("gpu", {"claim": claim_name}),), node_name=NODE, **kwargs)


def running_pod(name: str, claim_name: str, started: datetime, **kwargs: Any) -> dict[str, Any]:
    return direct_pod(
        name,
        claim_name,
        started - 2 * M,
        phase="Running",
        conditions=b.running_conditions(started - M, started),
        container_state=b.state_running(started),
        **kwargs,
    )


def allocated_claim(
    name: str, pods: list[dict[str, Any]], at: datetime, devices: int = 1, **kwargs: Any
) -> dict[str, Any]:
    return b.claim(
        NS,
        name,
        [b.request(count=devices)],
        at - M,
        allocated=[("gpu", NODE, f"gpu-{i}") for i in range(devices)],
        allocated_at=at,
        reserved_for=pods,
        **kwargs,
    )


def history(*snapshots: tuple[datetime, list[dict[str, Any]]]) -> MemoryHistory:
    return MemoryHistory([(at, base() + objs) for at, objs in snapshots])


def flagged(h: MemoryHistory, thresholds: Thresholds | None = None) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in find_leaks(h, thresholds)["claims"]}


# --- orphaned-allocation ----------------------------------------------------------------------------


def test_orphaned_after_job_pod_succeeded_and_was_deleted() -> None:
    job = b.pod(
        NS,
        "train-x7k2p",
        T0,
        claims=(("gpu", {"claim": "train-gpu"}),),
        node_name=NODE,
        phase="Running",
        conditions=b.running_conditions(T0, T0 + M),
        container_state=b.state_running(T0 + M),
        owner=("Job", "train"),
    )
    done = b.pod(
        NS,
        "train-x7k2p",
        T0,
        claims=(("gpu", {"claim": "train-gpu"}),),
        node_name=NODE,
        phase="Succeeded",
        conditions=b.completed_conditions(T0, T0 + 8 * H),
        container_state=b.state_terminated(T0 + M, T0 + 8 * H),
        owner=("Job", "train"),
    )
    claim = allocated_claim("train-gpu", [job], T0, devices=2)
    h = history(
        (T0 + H, [claim, job]),
        (T0 + 9 * H, [claim, done]),
        (T0 + 10 * H, [claim]),
    )
    leak = flagged(h)["train-gpu"]
    assert leak["reason"] == "orphaned-allocation"
    assert leak["devices"] == [
        {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
        {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1"},
    ]
    assert leak["held_since"] == "2026-11-02T00:00:00Z"
    assert leak["device_hours"] == pytest.approx(20.0, rel=0.01)  # 2 devices × 10 h
    assert leak["observed_since"] == "2026-11-02T08:00:00Z"  # the container's finishedAt
    assert leak["owner"] == {
        "namespace": NS,
        "pod": "train-x7k2p",
        "pod_uid": job["metadata"]["uid"],
        "workload": "Job/train",
        "source": "direct",
    }
    assert leak["consumers"][0]["state"] == "gone"
    assert "succeeded at 2026-11-02T08:00:00Z" in leak["message"]


def test_orphaned_with_failed_pod_still_present() -> None:
    failed = direct_pod(
        "etl-0",
        "etl-gpu",
        T0,
        phase="Failed",
        conditions=b.completed_conditions(T0, T0 + 2 * H),
        container_state=b.state_terminated(T0 + M, T0 + 2 * H, exit_code=137),
    )
    h = history((T0 + 3 * H, [allocated_claim("etl-gpu", [failed], T0), failed]))
    leak = flagged(h)["etl-gpu"]
    assert leak["reason"] == "orphaned-allocation"
    assert leak["consumers"][0]["state"] == "terminal"
    assert leak["device_hours"] == pytest.approx(3.0, rel=0.01)


def test_orphaned_when_every_consumer_of_a_shared_claim_is_done() -> None:
    a = direct_pod(
        "a",
        "shared",
        T0,
        phase="Succeeded",
        container_state=b.state_terminated(T0 + M, T0 + H),
    )
    c = direct_pod(
        "c",
        "shared",
        T0,
        phase="Succeeded",
        container_state=b.state_terminated(T0 + M, T0 + 2 * H),
    )
    h = history((T0 + 4 * H, [allocated_claim("shared", [a, c], T0), a, c]))
    leak = flagged(h)["shared"]
    assert leak["reason"] == "orphaned-allocation"
    assert leak["observed_since"] == "2026-11-02T02:00:00Z"  # when the last one finished
    assert "every consumer" in leak["message"]


def test_consumer_never_seen_counts_from_the_first_snapshot_that_shows_the_claim() -> None:
    claim = b.claim(
        NS,
        "ghost",
        [b.request()],
        T0,
        allocated=[("gpu", NODE, "gpu-3")],
        allocated_at=T0,
        reserved_for=[("ghost-pod", b.object_uid("Pod", NS, "ghost-pod"))],
    )
    h = history((T0 + H, [claim]), (T0 + 2 * H, [claim]))
    leak = flagged(h)["ghost"]
    assert leak["reason"] == "orphaned-allocation"
    assert leak["observed_since"] == "2026-11-02T01:00:00Z"
    # One snapshot only: observed for 0 s, not past the threshold yet.
    assert flagged(MemoryHistory([(T0 + H, [*base(), claim])])) == {}


def test_deleted_running_pod_counts_from_its_deletion_timestamp() -> None:
    pod = running_pod("svc-0", "svc-gpu", T0)
    deleting = running_pod("svc-0", "svc-gpu", T0, deletion_timestamp=T0 + 5 * H)
    claim = allocated_claim("svc-gpu", [pod], T0)
    h = history((T0 + H, [claim, pod]), (T0 + 5 * H + M, [claim, deleting]), (T0 + 6 * H, [claim]))
    leak = flagged(h)["svc-gpu"]
    assert leak["reason"] == "orphaned-allocation"
    assert leak["observed_since"] == "2026-11-02T05:00:00Z"


def test_consumer_that_just_finished_is_not_flagged() -> None:
    done = direct_pod(
        "quick",
        "quick-gpu",
        T0,
        phase="Succeeded",
        container_state=b.state_terminated(T0 + M, T0 + 2 * H),
    )
    h = history((T0 + 2 * H + 5 * M, [allocated_claim("quick-gpu", [done], T0), done]))
    assert flagged(h) == {}


def test_custom_threshold_applies() -> None:
    done = direct_pod(
        "quick",
        "quick-gpu",
        T0,
        phase="Succeeded",
        container_state=b.state_terminated(T0 + M, T0 + 2 * H),
    )
    h = history((T0 + 2 * H + 20 * M, [allocated_claim("quick-gpu", [done], T0), done]))
    assert "quick-gpu" in flagged(h)
    assert flagged(h, Thresholds(orphaned=3600)) == {}
    assert find_leaks(h, Thresholds(orphaned=3600))["thresholds"]["orphaned-allocation"] == 3600


# --- unreserved-allocation --------------------------------------------------------------------------


def test_unreserved_since_allocation_when_never_reserved() -> None:
    claim = allocated_claim("parked", [], T0, devices=4)
    h = history((T0 + 3 * H, [claim]))
    leak = flagged(h)["parked"]
    assert leak["reason"] == "unreserved-allocation"
    assert leak["observed_since"] == "2026-11-02T00:00:00Z"
    assert leak["device_hours"] == pytest.approx(12.0, rel=0.01)


def test_unreserved_counts_from_the_version_that_dropped_the_reservation() -> None:
    pod = running_pod("w", "parked", T0 + M)
    reserved = allocated_claim("parked", [pod], T0)
    released = allocated_claim("parked", [], T0)
    h = history((T0 + H, [reserved, pod]), (T0 + 5 * H, [released]), (T0 + 5 * H + 30 * M, [released]))
    assert flagged(h) == {}  # unreserved for 30 min < 1 h, although allocated 5.5 h ago
    h = history((T0 + H, [reserved, pod]), (T0 + 5 * H, [released]), (T0 + 6 * H + M, [released]))
    assert flagged(h)["parked"]["observed_since"] == "2026-11-02T05:00:00Z"


def test_unreserved_within_threshold_is_not_flagged() -> None:
    h = history((T0 + 30 * M, [allocated_claim("fresh", [], T0)]))
    assert flagged(h) == {}


# --- held-by-failing-pod ----------------------------------------------------------------------------


def crashlooping(name: str, claim_name: str, created: datetime, last_run_end: datetime, restarts: int = 40):
    return direct_pod(
        name,
        claim_name,
        created,
        phase="Running",
        conditions=b.stuck_conditions(created + M, True),
        container_state=b.state_waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container"),
        restart_count=restarts,
        last_state=b.state_terminated(last_run_end - 20 * timedelta(seconds=1), last_run_end, exit_code=1),
    )


def test_crashloop_for_longer_than_threshold_is_flagged_from_one_snapshot() -> None:
    pod = crashlooping("trainer-0", "trainer-gpu", T0, T0 + 7 * H)
    h = history((T0 + 7 * H + 2 * M, [allocated_claim("trainer-gpu", [pod], T0 + M), pod]))
    leak = flagged(h)["trainer-gpu"]
    assert leak["reason"] == "held-by-failing-pod"
    assert leak["observed_since"] == "2026-11-02T00:01:00Z"  # never shown to run: since scheduling
    assert "CrashLoopBackOff" in leak["message"]


def test_image_pull_backoff_is_flagged() -> None:
    pod = direct_pod(
        "typo-0",
        "typo-gpu",
        T0,
        conditions=b.stuck_conditions(T0 + M, True),
        container_state=b.state_waiting("ImagePullBackOff", 'Back-off pulling image "nvcr.io/nvidia/pytorh"'),
    )
    h = history((T0 + 7 * H, [allocated_claim("typo-gpu", [pod], T0 + M), pod]))
    assert flagged(h)["typo-gpu"]["reason"] == "held-by-failing-pod"


def test_stuck_preparation_is_flagged_and_names_the_event() -> None:
    pod = direct_pod("prep-0", "prep-gpu", T0, conditions=b.stuck_conditions(T0 + M, False))
    ev = b.event(
        pod,
        "FailedPrepareDynamicResources",
        "Failed to prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded",
        T0 + 2 * M,
        T0 + 7 * H,
        count=80,
    )
    h = history((T0 + 7 * H, [allocated_claim("prep-gpu", [pod], T0 + M), pod, ev]))
    leak = flagged(h)["prep-gpu"]
    assert leak["reason"] == "held-by-failing-pod"
    assert "FailedPrepareDynamicResources ×80" in leak["message"]


def test_each_stuck_pod_names_only_its_own_preparation_failures_summed() -> None:
    first = direct_pod("prep-0", "prep-gpu-0", T0, conditions=b.stuck_conditions(T0 + M, False))
    second = direct_pod("prep-1", "prep-gpu-1", T0, conditions=b.stuck_conditions(T0 + M, False))
    events = [
        b.event(first, "FailedPrepareDynamicResources", "timed out", T0 + 2 * M, T0 + 3 * H, count=30),
        b.event(first, "FailedPrepareDynamicResources", "device busy", T0 + 3 * H, T0 + 7 * H, count=50),
        b.event(first, "FailedScheduling", "not this one", T0, T0 + M, count=9),
        b.event(second, "FailedPrepareDynamicResources", "driver gone", T0 + 2 * M, T0 + 7 * H, count=4),
    ]
    claims = [
        allocated_claim("prep-gpu-0", [first], T0 + M),
        b.claim(NS, "prep-gpu-1", [b.request()], T0, allocated=[("gpu", NODE, "gpu-5")], allocated_at=T0 + M,
                reserved_for=[second]),
    ]
    found = flagged(history((T0 + 7 * H, [*claims, first, second, *events])))
    assert found["prep-gpu-0"]["message"].endswith("; FailedPrepareDynamicResources ×80: device busy.")
    assert found["prep-gpu-1"]["message"].endswith("; FailedPrepareDynamicResources ×4: driver gone.")


def test_pod_within_normal_startup_is_not_flagged() -> None:
    pod = direct_pod("new-0", "new-gpu", T0, conditions=b.stuck_conditions(T0 + M, False))
    h = history((T0 + 20 * M, [allocated_claim("new-gpu", [pod], T0 + M), pod]))
    assert flagged(h) == {}


def test_crashloop_after_a_long_stable_run_counts_from_the_first_crash() -> None:
    stable = running_pod("api-0", "api-gpu", T0)
    first_crash = T0 + 72 * H
    crash = crashlooping("api-0", "api-gpu", T0 - 2 * M, first_crash, restarts=1)
    crash["status"]["containerStatuses"][0]["lastState"]["terminated"]["startedAt"] = b.ts(T0)
    later = crashlooping("api-0", "api-gpu", T0 - 2 * M, first_crash + 2 * H, restarts=25)
    claim = allocated_claim("api-gpu", [stable], T0 - M)
    snaps = [(T0 + H, [claim, stable]), (first_crash + 5 * M, [claim, crash]), (first_crash + 2 * H, [claim, later])]
    # Two hours of crash-looping after three good days: not yet.
    assert flagged(history(*snaps)) == {}
    h = history(*snaps, (first_crash + 7 * H, [claim, later]))
    leak = flagged(h)["api-gpu"]
    assert leak["reason"] == "held-by-failing-pod"
    assert leak["observed_since"] == b.ts(first_crash)


def test_running_consumer_that_restarted_once_long_ago_is_not_flagged() -> None:
    pod = running_pod(
        "svc-1",
        "svc-gpu",
        T0 + 2 * H,
        restart_count=1,
        last_state=b.state_terminated(T0, T0 + 2 * H - M, exit_code=1),
    )
    h = history((T0 + 200 * H, [allocated_claim("svc-gpu", [pod], T0 - M), pod]))
    assert flagged(h) == {}


def test_long_running_service_is_not_flagged() -> None:
    pod = running_pod("inference-0", "inference-gpu", T0)
    claim = allocated_claim("inference-gpu", [pod], T0 - M, devices=8)
    h = history((T0, [claim, pod]), (T0 + 30 * 24 * H, [claim, pod]))
    assert flagged(h) == {}


def test_template_claim_of_a_healthy_pod_is_not_flagged() -> None:
    pod = b.pod(
        NS,
        "notebook-0",
        T0,
        node_name=NODE,
        phase="Running",
        conditions=b.running_conditions(T0, T0 + M),
        container_state=b.state_running(T0 + M),
    )
    template = base()[-1]
    claim = b.template_claim(template, pod, allocated=[("gpu", NODE, "gpu-5")], allocated_at=T0, reserved_for=[pod])
    h = history((T0 + 100 * H, [claim, pod]))
    assert flagged(h) == {}


def test_shared_claim_with_one_running_consumer_is_not_flagged() -> None:
    ok = running_pod("ok-0", "shared", T0)
    bad = crashlooping("bad-0", "shared", T0, T0 + 9 * H)
    h = history((T0 + 10 * H, [allocated_claim("shared", [ok, bad], T0), ok, bad]))
    assert flagged(h) == {}


def test_non_pod_consumer_is_never_judged() -> None:
    claim = allocated_claim("ext", [{"resource": "jobsets", "name": "js", "uid": "0000-js"}], T0)
    h = history((T0 + 100 * H, [claim]))
    assert flagged(h) == {}


def test_admin_access_and_unallocated_claims_hold_nothing() -> None:
    admin = b.claim(
        NS,
        "monitor",
        [b.request(admin_access=True)],
        T0,
        allocated=[("gpu", NODE, "gpu-0")],
        allocated_at=T0,
        admin_access=True,
    )
    pending = b.claim(NS, "pending", [b.request()], T0)
    h = history((T0 + 100 * H, [admin, pending]))
    assert flagged(h) == {}


# --- stuck-deletion ---------------------------------------------------------------------------------


def test_stuck_deletion_is_flagged_and_wins_over_other_reasons() -> None:
    claim = allocated_claim("doomed", [], T0, deletion_timestamp=T0 + 2 * H)
    h = history((T0 + 3 * H, [claim]))
    leak = flagged(h)["doomed"]
    assert leak["reason"] == "stuck-deletion"
    assert leak["observed_since"] == "2026-11-02T02:00:00Z"
    assert "resource.kubernetes.io/delete-protection" in leak["message"]


def test_recent_deletion_reports_the_older_condition_instead() -> None:
    claim = allocated_claim("doomed", [], T0, deletion_timestamp=T0 + 3 * H - 5 * M)
    h = history((T0 + 3 * H, [claim]))
    assert flagged(h)["doomed"]["reason"] == "unreserved-allocation"


def test_recent_deletion_alone_is_not_flagged() -> None:
    pod = running_pod("r", "doomed", T0)
    claim = allocated_claim("doomed", [pod], T0, deletion_timestamp=T0 + 3 * H - 5 * M)
    assert flagged(history((T0 + 3 * H, [claim, pod]))) == {}


# --- time and ordering ------------------------------------------------------------------------------


def test_verdicts_depend_only_on_history_and_as_of() -> None:
    done = direct_pod(
        "j",
        "j-gpu",
        T0,
        phase="Succeeded",
        container_state=b.state_terminated(T0 + M, T0 + H),
    )
    snaps = [(T0 + H + 5 * M, [*base(), allocated_claim("j-gpu", [done], T0), done])]
    snaps.append((T0 + 2 * H, snaps[0][1]))
    assert find_leaks(MemoryHistory(snaps, as_of=T0 + H + 5 * M))["claims"] == []
    later = find_leaks(MemoryHistory(snaps))
    assert later == find_leaks(MemoryHistory(snaps))
    assert later["as_of"] == "2026-11-02T02:00:00Z"
    assert [c["name"] for c in later["claims"]] == ["j-gpu"]


def test_claims_sorted_by_device_hours() -> None:
    h = history((T0 + 5 * H, [allocated_claim("small", [], T0), allocated_claim("big", [], T0, devices=3)]))
    assert [c["name"] for c in find_leaks(h)["claims"]] == ["big", "small"]


def test_flagged_intervals_start_after_the_threshold() -> None:
    done = direct_pod("j", "j-gpu", T0, phase="Succeeded", container_state=b.state_terminated(T0 + M, T0 + H))
    claim = allocated_claim("j-gpu", [done], T0, devices=2)
    h = history((T0 + 2 * H, [claim, done]), (T0 + 5 * H, []))
    versions = h.versions("ResourceClaim", claim["metadata"]["uid"])
    intervals = flagged_intervals(h, versions, T0, T0 + 10 * H, Thresholds())
    assert len(intervals) == 1
    assert intervals[0].start == T0 + H + 15 * M
    assert intervals[0].end == T0 + 5 * H  # the claim's deletion
    assert intervals[0].reason == "orphaned-allocation"
    assert len(intervals[0].devices) == 2
