"""What the real Kubernetes 1.37 scheduler writes, read by Claimline without a control plane.

tests/fixtures/real/ holds the FailedScheduling events and conditions that kube-scheduler v1.37.2 wrote in
tests/test_control_plane_e2e.py (CLAIMLINE_RECORD_REAL=1 rewrites them). Its event comes through events.k8s.io/v1:
served as core/v1 it has no firstTimestamp, lastTimestamp or count, only an eventTime, and it says the same
"cannot allocate all claims" whatever stops the claim, so the reason is Claimline's own analysis.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from domain.boundaries.binding import is_binding_failure
from domain.cluster.state import MemoryHistory
from domain.verdicts.explain import explain

REAL = Path(__file__).parent / "fixtures" / "real"
FAILURES = sorted(p.stem for p in REAL.glob("*.json") if "event" in json.loads(p.read_text()))
NS = "ml"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def recorded(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REAL / f"{case}.json").read_text())
    return data


def test_every_recorded_failure_is_the_schedulers_event() -> None:
    assert FAILURES, "tests/fixtures/real/ has no FailedScheduling event"
    for case in FAILURES:
        event = recorded(case)["event"]
        assert (event["reason"], event["reportingComponent"], event["type"]) == (
            "FailedScheduling", "default-scheduler", "Warning"
        ), case
        assert event["eventTime"] and not event.get("firstTimestamp") and not event.get("count"), case
        assert "cannot allocate all claims" in event["message"], case


@pytest.mark.parametrize("case", FAILURES)
def test_allocation_failures_are_not_read_as_failed_binding(case: str) -> None:
    assert not is_binding_failure(recorded(case)["event"]["message"])


def test_the_verdict_quotes_the_real_event_with_its_event_time() -> None:
    """A claim no device satisfies, with the event the real scheduler wrote about such a Pod."""
    real = recorded("selector")
    created = T0 - timedelta(minutes=5)
    tpl = b.claim_template(NS, "h100", [b.request(selectors=["device.attributes['gpu.nvidia.com'].productName"
                                                             " == 'NVIDIA H100 80GB HBM3'"])])
    pod = b.pod(NS, "train", created, claims=[("gpu", {"template": "h100"})],
                conditions=[b.unschedulable(created, real["condition"]["message"])])
    event = {"apiVersion": "v1", "kind": "Event", **copy.deepcopy(real["event"])}  # a list's items name neither
    event["metadata"]["namespace"] = NS
    event["involvedObject"].update(namespace=NS, name="train", uid=pod["metadata"]["uid"])
    event["eventTime"] = (created + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # as the API has it
    objects = [b.namespace(NS), b.device_class(), b.node("worker-0", created - timedelta(days=1)),
               b.resource_slice("worker-0", b.gpu_devices("worker-0", 2)), tpl, pod, b.template_claim(tpl, pod),
               event]
    verdict = explain(MemoryHistory([(T0, objects)]), NS, "train")["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "selector-unsatisfiable")
    assert verdict["message"].endswith(f'; the scheduler reported "{real["event"]["message"]}" at {event["eventTime"]}')
