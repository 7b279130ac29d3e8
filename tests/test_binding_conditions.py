"""Binding conditions hold a Pod in the scheduler's PreBind: allocation verdicts, never preparation ones.

Each situation is a dump built with demo.builders, imported with ``import-snapshot``
and explained with ``explain --json``; time comes from the snapshot, never the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from tests.clusters import cli_json_over

pytestmark = pytest.mark.django_db

NS = "ml"
NODE = "gpu-node-0"
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CREATED = T0 - timedelta(days=30)
ATTACHED = "gpu.nvidia.com/FabricAttached"
ATTACH_FAILED = "gpu.nvidia.com/FabricAttachFailed"

Obj = dict[str, Any]


def cluster() -> list[Obj]:
    devices = [b.with_binding_conditions(d, [ATTACHED], [ATTACH_FAILED]) for d in b.gpu_devices(NODE, 2)]
    return [
        b.namespace(NS, created=CREATED),
        b.node(NODE, CREATED, heartbeat=T0),
        b.device_class(created=CREATED),
        b.resource_slice(NODE, devices, created=CREATED),
    ]


def held_in_prebind(allocated_at: datetime, conditions: list[Obj] | None = None) -> list[Obj]:
    """Allocated and reserved, the BindingConditionsPending event recorded, the Pod not bound."""
    created = allocated_at - timedelta(seconds=2)
    p = b.pod(NS, "trainer-0", created, claims=[("gpu", {"claim": "trainer-gpu"})])
    c = b.claim(
        NS, "trainer-gpu", [b.request()], created, allocated_at=allocated_at, reserved_for=[p],
        allocated=[b.binding_result("gpu", NODE, "gpu-0", [ATTACHED], [ATTACH_FAILED])],
        device_conditions=[(NODE, "gpu-0", conditions)] if conditions else None,
    )
    waiting = b.event(
        p, "BindingConditionsPending", f"waiting for binding conditions for device on node {NODE}", allocated_at,
        type="Normal", component="default-scheduler",
    )
    return [p, c, waiting]


def explain(tmp_path: Path, objects: list[Obj], capsys: pytest.CaptureFixture[str]) -> Any:
    return cli_json_over(tmp_path, objects, T0, capsys, "explain", f"{NS}/trainer-0")


def test_missing_binding_condition_is_binding_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = explain(tmp_path, [*cluster(), *held_in_prebind(T0 - timedelta(minutes=2))], capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "binding-pending"), verdict
    assert f"{NODE}/gpu-0 lacks {ATTACHED} (not reported)" in verdict["message"]
    assert "120 s of the scheduler's 600 s" in verdict["message"]
    [claim] = doc["claims"]
    allocation = claim["boundaries"]["allocation"]
    assert allocation["state"] == "pending"
    assert any(e.get("reason") == "BindingConditionsPending" for e in allocation["evidence"])
    assert claim["boundaries"]["preparation"]["state"] != "failed"


def test_false_binding_condition_is_a_wait_not_a_preparation_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allocated_at = T0 - timedelta(minutes=2)
    attaching = b.condition(ATTACHED, False, allocated_at + timedelta(seconds=5), "Attaching", "fabric attach in progress")
    doc = explain(tmp_path, [*cluster(), *held_in_prebind(allocated_at, [attaching])], capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "binding-pending", verdict
    assert f"{ATTACHED} (False, Attaching)" in verdict["message"]
    [claim] = doc["claims"]
    assert claim["boundaries"]["preparation"]["state"] != "failed"
    entries = [e for e in claim["timeline"] if ATTACHED in e["what"]]
    assert [e["boundary"] for e in entries] == ["allocation"]


def test_true_failure_condition_is_binding_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    allocated_at = T0 - timedelta(minutes=3)
    failed = b.condition(
        ATTACH_FAILED, True, allocated_at + timedelta(seconds=40), "SwitchUnreachable", "fabric switch 3 did not answer"
    )
    doc = explain(tmp_path, [*cluster(), *held_in_prebind(allocated_at, [failed])], capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "binding-failed"), verdict
    assert f"{ATTACH_FAILED}=True" in verdict["message"]
    assert "SwitchUnreachable" in verdict["message"]
    assert "fabric switch 3 did not answer" in verdict["message"]
    assert doc["claims"][0]["boundaries"]["preparation"]["state"] != "failed"


def test_binding_past_the_timeout_is_binding_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = explain(tmp_path, [*cluster(), *held_in_prebind(T0 - timedelta(seconds=725))], capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "binding-failed"), verdict
    assert "timed out after 725 s" in verdict["message"]
    assert f"lacks {ATTACHED}" in verdict["message"]


def test_bound_pod_whose_binding_conditions_held_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    allocated_at = T0 - timedelta(minutes=30)
    attached_at = allocated_at + timedelta(seconds=50)
    started = attached_at + timedelta(seconds=30)
    p = b.pod(
        NS, "trainer-0", allocated_at - timedelta(seconds=2), claims=[("gpu", {"claim": "trainer-gpu"})],
        node_name=NODE, phase="Running", conditions=b.running_conditions(attached_at, started),
        container_state=b.state_running(started),
    )
    c = b.claim(
        NS, "trainer-gpu", [b.request()], allocated_at, allocated_at=allocated_at, reserved_for=[p],
        allocated=[b.binding_result("gpu", NODE, "gpu-0", [ATTACHED], [ATTACH_FAILED])],
        device_conditions=[
            (NODE, "gpu-0", [
                b.condition(ATTACHED, True, attached_at, "Attached"),
                b.condition(ATTACH_FAILED, False, attached_at, "Attached"),
            ])
        ],
    )
    doc = explain(tmp_path, [*cluster(), p, c], capsys)
    verdict = doc["verdict"]
    assert verdict["reason"] == "ok", verdict
    assert f"{NODE}/gpu-0" in verdict["message"]
    # The failure condition reported False is not a preparation failure either.
    assert doc["claims"][0]["boundaries"]["preparation"]["state"] == "ok"


def test_ready_binding_conditions_on_an_unbound_pod_are_not_a_binding_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allocated_at = T0 - timedelta(minutes=2)
    attached = b.condition(ATTACHED, True, allocated_at + timedelta(seconds=30), "Attached")
    doc = explain(tmp_path, [*cluster(), *held_in_prebind(allocated_at, [attached])], capsys)
    assert doc["verdict"]["reason"] not in ("binding-pending", "binding-failed"), doc["verdict"]


def deallocated_after(message: str) -> list[Obj]:
    """PreBind gave up and the claim was deallocated; the Pod waits for its next scheduling attempt."""
    created = T0 - timedelta(minutes=12)
    p = b.pod(NS, "trainer-0", created, claims=[("gpu", {"claim": "trainer-gpu"})],
              conditions=[b.unschedulable(T0 - timedelta(minutes=1), message)])
    c = b.claim(NS, "trainer-gpu", [b.request()], created)
    failed = b.event(p, "FailedScheduling", message, T0 - timedelta(minutes=1), component="default-scheduler")
    return [p, c, failed]


def test_deallocated_after_a_binding_failure_is_binding_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = (
        'running PreBind plugin "DynamicResources": claim trainer-gpu binding failed: '
        'reason=SwitchUnreachable, message="fabric switch 3 did not answer"'
    )
    doc = explain(tmp_path, [*cluster(), *deallocated_after(said)], capsys)
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "binding-failed"), verdict
    assert "reason=SwitchUnreachable" in verdict["message"]
    assert "claim trainer-gpu was deallocated" in verdict["message"]


def test_deallocated_after_another_scheduling_failure_waits_for_the_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = "0/1 nodes are available: 1 Insufficient cpu."
    doc = explain(tmp_path, [*cluster(), *deallocated_after(said)], capsys)
    assert doc["verdict"]["reason"] == "waiting-for-scheduler", doc["verdict"]
