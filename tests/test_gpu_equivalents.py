"""GPU-equivalents: a partition or a share of a GPU counts the fraction of the physical device it holds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.inventory.devices import Inventory
from domain.reports.capacity import CSV_HEADER, review_csv_rows, review_table, weekly_review
from domain.reports.leaks import find_leaks
from domain.reports.metrics import render_metrics
from domain.reports.overview import devices_by_model
from tests.snapshot_cli import cli_json, import_objects

T0 = datetime(2026, 11, 16, 8, 0, tzinfo=UTC)  # a Monday: the review's week starts at midnight before
NODE = "h100-0"
NS = "ml"
MIG_CLASS = "mig.nvidia.com"
MIG = f"device.attributes['{b.GPU_DRIVER}'].type == 'mig'"
SHARE = b.request_policy(default="8Gi", min="8Gi", step="8Gi", max="80Gi")
L40S = {"product": "NVIDIA L40S", "memory": "80Gi", "architecture": "Ada Lovelace", "cuda_compute": "8.9.0"}
H100 = "NVIDIA H100 80GB HBM3"


def cluster() -> list[dict[str, Any]]:
    """One H100 advertised whole and as two 3g.40gb partitions, a shared L40S (gpu-1), and a plain A100."""
    counters, devices = b.partitioned_gpu(NODE)
    shared = b.shared_gpu("gpu-1", NODE, policy=SHARE, model=L40S)
    return [
        b.node(NODE, T0 - timedelta(days=1)),
        b.device_class(created=T0 - timedelta(days=1)),
        b.device_class(MIG_CLASS, selectors=[MIG], created=T0 - timedelta(days=1)),
        b.counter_slice(NODE, [counters], created=T0 - timedelta(days=1)),
        b.resource_slice(NODE, [*devices, shared], slice_count=2, created=T0 - timedelta(days=1)),
        b.resource_slice("a100-0", b.gpu_devices("a100-0", 1), created=T0 - timedelta(days=1)),
        b.node("a100-0", T0 - timedelta(days=1)),
    ]


def unreserved_claims() -> list[dict[str, Any]]:
    """Allocated at T0 and never reserved: flagged unreserved-allocation after an hour."""
    return [
        b.claim(NS, "part", [b.request(device_class=MIG_CLASS)], T0, allocated=[("gpu", NODE, "gpu-0-mig-3g-0")]),
        b.claim(
            NS,
            "share",
            [b.with_capacity(b.request(), {"memory": "20Gi"})],
            T0,
            allocated=[b.shared_result("gpu", NODE, "gpu-1", {"memory": "24Gi"})],
        ),
        b.claim(NS, "whole", [b.request()], T0, allocated=[("gpu", "a100-0", "gpu-0")]),
    ]


@pytest.fixture
def history() -> MemoryHistory:
    objects = [*cluster(), *unreserved_claims()]
    return MemoryHistory([(T0, objects), (T0 + timedelta(hours=4), objects)])


def test_leaks_give_gpu_equivalent_hours_and_each_shared_devices_fraction(history: MemoryHistory) -> None:
    claims = {c["name"]: c for c in find_leaks(history)["claims"]}
    assert {n: c["reason"] for n, c in claims.items()} == dict.fromkeys(("part", "share", "whole"), "unreserved-allocation")
    assert claims["part"]["device_hours"] == 4.0 and claims["part"]["gpu_equivalent_hours"] == 2.0
    assert claims["part"]["devices"][0]["fraction"] == 0.5  # max(40Gi/80Gi, 3/7 compute slices)
    assert claims["share"]["gpu_equivalent_hours"] == pytest.approx(4 * 24 / 80)
    assert claims["share"]["devices"][0]["fraction"] == 0.3
    # A whole device: as many GPU-equivalent hours as device-hours, and its entry keeps its shape.
    assert claims["whole"]["gpu_equivalent_hours"] == claims["whole"]["device_hours"] == 4.0
    assert "fraction" not in claims["whole"]["devices"][0]
    assert claims["part"]["leaked_gpu_equivalent_hours"] == 1.5  # flagged after the 1 h threshold


def test_weekly_review_counts_gpu_equivalent_hours_beside_device_hours(history: MemoryHistory) -> None:
    review = weekly_review(history, T0.replace(hour=0))
    totals = review["totals"]
    assert totals["allocated_device_hours"] == 12.0
    assert totals["allocated_gpu_equivalent_hours"] == pytest.approx(4 * (0.5 + 0.3 + 1), abs=0.01)
    assert totals["leaked_gpu_equivalent_hours"] == pytest.approx(3 * (0.5 + 0.3 + 1), abs=0.01)
    # Advertised: the partitioned H100 is one GPU, not three.
    assert {m["model"]: m["advertised_device_hours"] for m in review["by_model"]} == {
        "NVIDIA A100-SXM4-40GB": 4.0,
        H100: 4.0,
        "NVIDIA L40S": 4.0,
    }
    rows = review_csv_rows(review)
    assert rows[0] == CSV_HEADER and "allocated_gpu_equivalent_hours" in CSV_HEADER
    assert rows[1][CSV_HEADER.index("allocated_gpu_equivalent_hours")] == "7.20"
    header, table = review_table(review)
    assert header[-3:] == ["Allocated GPU-equivalent hours", "Leaked GPU-equivalent hours", "Leak reason"]
    assert table[0][-3] == "7.20"
    assert review["series"]["devices"][-1]["allocated"] == 1.8  # GPU-equivalents, as the overview counts


def test_overview_counts_a_partitioned_gpu_once(history: MemoryHistory) -> None:
    models = {m["model"]: m for m in devices_by_model(Inventory.of(history.state))["models"]}
    h100 = models[H100]
    assert (h100["advertised"], h100["allocated"], h100["free"], h100["gpu_equivalents"]) == (1, 0.5, 0.5, True)
    l40s = models["NVIDIA L40S"]
    assert (l40s["advertised"], l40s["allocated"], l40s["free"], l40s["gpu_equivalents"]) == (1, 0.3, 0.7, True)
    a100 = models["NVIDIA A100-SXM4-40GB"]
    assert (a100["advertised"], a100["allocated"], a100["free"], a100["gpu_equivalents"]) == (1, 1, 0, False)


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if line.startswith(name + " ") and not labels:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in metrics")


def test_metrics_give_gpu_equivalents_by_model_and_flagged_gpu_equivalent_hours(history: MemoryHistory) -> None:
    text = render_metrics(history)
    assert _value(text, "claimline_model_devices_advertised", model=H100) == 3  # whole and two partitions
    assert _value(text, "claimline_model_gpu_equivalents_advertised", model=H100) == 1
    assert _value(text, "claimline_model_gpu_equivalents_allocated", model=H100) == 0.5
    assert _value(text, "claimline_model_gpu_equivalents_allocated", model="NVIDIA L40S") == 0.3
    # Seconds, Prometheus' base unit: 7.2 GPU-equivalent hours.
    assert _value(text, "claimline_flagged_gpu_equivalent_seconds", namespace=NS, reason="unreserved-allocation") == 7.2 * 3600
    assert _value(text, "claimline_flagged_gpu_equivalent_seconds", namespace="(other)", reason="stuck-deletion") == 0
    assert re.search(r"# TYPE claimline_flagged_gpu_equivalent_seconds gauge", text)


@pytest.mark.django_db
def test_explain_counts_devices_short_of_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h100 = f"device.attributes['{b.GPU_DRIVER}'].productName == '{H100}'"
    whole = b.claim(NS, "whole-h100", [b.request(selectors=[h100])], T0)
    pod = b.pod(
        NS,
        "train",
        T0,
        claims=[("gpu", {"claim": "whole-h100"})],
        conditions=[b.unschedulable(T0, "0/2 nodes are available: 2 cannot allocate all claims.")],
    )
    import_objects(tmp_path, [*cluster(), *unreserved_claims()[:1], whole, pod], at=T0 + timedelta(minutes=5))
    doc = cli_json(capsys, "explain", f"{NS}/train", "--json")
    assert (doc["verdict"]["reason"]) == "devices-in-use"
    evidence = doc["claims"][0]["boundaries"]["allocation"]["evidence"]
    [match] = [e for e in evidence if e["kind"] == "DeviceMatch" and "matching" in e]  # the per-ask summary
    assert (match["matching"], match["held"], match["short"]) == (1, 0, 1)


@pytest.mark.django_db
def test_retained_page_gives_a_partitions_fraction_and_gpu_equivalent_hours(tmp_path: Path, admin_client: Any) -> None:
    import_objects(tmp_path, [*cluster(), *unreserved_claims()], at=T0 + timedelta(hours=4))
    body = admin_client.get("/c/demo/retained/").content.decode()
    row = body.split(f'data-claim="{NS}/part"', 1)[1].split("</tr>", 1)[0]
    assert f"{NODE}/gpu-0-mig-3g-0" in row and 'data-testid="fraction">(0.5 of a GPU)<' in row
    assert "2.0 GPU-equivalent hours held, 1.5 leaked" in row
    whole = body.split(f'data-claim="{NS}/whole"', 1)[1].split("</tr>", 1)[0]
    assert "of a GPU" not in whole and "GPU-equivalent hours" not in whole
