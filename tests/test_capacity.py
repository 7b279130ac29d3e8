"""The weekly capacity review over a synthetic two-week history, and its CSV export."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo import builders as b
from domain.cluster.state import ClusterState, MemoryHistory, Version
from domain.inventory.devices import advertised_devices
from domain.reports.capacity import (
    CSV_HEADER,
    InventoryTimeline,
    allocation_stretches,
    percent,
    review_csv_rows,
    weekly_review,
)
from domain.reports.leaks import Thresholds

H = timedelta(hours=1)
D = timedelta(days=1)
PREV = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
WEEK = PREV + 7 * D
END = WEEK + 7 * D
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def inventory() -> list[dict[str, Any]]:
    return [
        b.namespace("research"),
        b.namespace("analytics"),
        b.device_class(),
        b.node("node-a", PREV - 60 * D),
        b.node("node-b", PREV - 60 * D),
        b.resource_slice("node-a", b.gpu_devices("node-a", 8, b.A100_40GB)),
        b.resource_slice("node-b", b.gpu_devices("node-b", 4, b.H100_80GB)),
    ]


def running(ns: str, name: str, claim: str, node: str, started: datetime) -> dict[str, Any]:
    return b.pod(
        ns,
        name,
        started,
        claims=(("gpu", {"claim": claim}),),
        node_name=node,
        phase="Running",
        conditions=b.running_conditions(started, started),
        container_state=b.state_running(started),
    )


def held(ns: str, name: str, node: str, devices: list[str], at: datetime, pods: list[Any]) -> dict[str, Any]:
    return b.claim(
        ns,
        name,
        [b.request(count=len(devices))],
        at,
        allocated=[("gpu", node, d) for d in devices],
        allocated_at=at,
        reserved_for=pods,
    )


def two_weeks() -> list[tuple[datetime, list[dict[str, Any]]]]:
    """research/train holds 2 A100s throughout; analytics/etl parks an A100 for a day in the
    previous week (unreserved); analytics/report keeps an H100 after its job ends in the week."""
    trainer = running("research", "train-0", "train", "node-a", PREV)
    train = held("research", "train", "node-a", ["gpu-0", "gpu-1"], PREV, [trainer])
    etl = held("analytics", "etl", "node-a", ["gpu-5"], PREV + D, [])
    job_start = WEEK + D
    job = running("analytics", "report-abcde", "report", "node-b", job_start)
    done = b.pod(
        "analytics",
        "report-abcde",
        job_start,
        claims=(("gpu", {"claim": "report"}),),
        node_name="node-b",
        phase="Succeeded",
        container_state=b.state_terminated(job_start, job_start + 10 * H),
    )
    report = held("analytics", "report", "node-b", ["gpu-2"], job_start, [job])
    base = [*inventory(), train, trainer]
    return [
        (PREV, base),
        (PREV + D, [*base, etl]),
        (PREV + 2 * D, base),
        (job_start, [*base, report, job]),
        (job_start + 12 * H, [*base, report, done]),
        (job_start + D, [*base, report]),
        (END, [*base, report]),
    ]


@pytest.fixture(scope="module")
def review() -> dict[str, Any]:
    return weekly_review(MemoryHistory(two_weeks()), WEEK)


def test_weeks(review: dict[str, Any]) -> None:
    assert review["as_of"] == "2026-11-16T00:00:00Z"
    assert review["week"] == {"start": "2026-11-09T00:00:00Z", "end": "2026-11-16T00:00:00Z", "partial": False}
    assert review["previous_week"]["start"] == "2026-11-02T00:00:00Z"


def test_totals(review: dict[str, Any]) -> None:
    t = review["totals"]
    # 2 × 168 h (train) + 1 × 144 h (report, from Tuesday on).
    assert t["allocated_device_hours"] == pytest.approx(480.0, rel=0.01)
    # 2 × 168 h (train) + 1 × 24 h (etl).
    assert t["previous_allocated_device_hours"] == pytest.approx(360.0, rel=0.01)
    assert t["allocated_delta"] == pytest.approx(120.0, rel=0.01)
    # report: orphaned from 10:00 Tuesday, flagged 15 min later, until the end of the week.
    assert t["leaked_device_hours"] == pytest.approx(144 - 10.25, rel=0.01)
    # etl: unreserved from its allocation, flagged an hour later, until deleted a day later.
    assert t["previous_leaked_device_hours"] == pytest.approx(23.0, rel=0.01)
    assert t["advertised_device_hours"] == pytest.approx(12 * 168, rel=0.01)
    assert t["utilization"] == pytest.approx(480 / 2016, rel=0.01)


def test_by_namespace(review: dict[str, Any]) -> None:
    rows = {r["namespace"]: r for r in review["by_namespace"]}
    assert list(rows) == ["research", "analytics"]  # most allocated first
    assert rows["research"]["allocated_device_hours"] == pytest.approx(336.0, rel=0.01)
    assert rows["research"]["leaked_device_hours"] == 0
    assert rows["analytics"]["allocated_device_hours"] == pytest.approx(144.0, rel=0.01)
    assert rows["analytics"]["previous_allocated_device_hours"] == pytest.approx(24.0, rel=0.01)
    assert rows["analytics"]["leaked_delta"] == pytest.approx(133.75 - 23.0, rel=0.01)


def test_by_model(review: dict[str, Any]) -> None:
    rows = {r["model"]: r for r in review["by_model"]}
    assert set(rows) == {A100, H100}
    assert rows[A100]["allocated_device_hours"] == pytest.approx(336.0, rel=0.01)
    assert rows[A100]["previous_allocated_device_hours"] == pytest.approx(360.0, rel=0.01)
    assert rows[A100]["advertised_device_hours"] == pytest.approx(8 * 168, rel=0.01)
    assert rows[H100]["leaked_device_hours"] == pytest.approx(133.75, rel=0.01)


def test_top_offenders(review: dict[str, Any]) -> None:
    [top] = review["top_offenders"]
    assert (top["namespace"], top["name"], top["reason"]) == ("analytics", "report", "orphaned-allocation")
    assert top["models"] == [H100]
    assert top["devices"] == [{"driver": "gpu.nvidia.com", "pool": "node-b", "device": "gpu-2"}]
    assert top["owner"]["pod"] == "report-abcde"


def test_series(review: dict[str, Any]) -> None:
    points = review["series"]["devices"]
    assert points[0] == {"at": "2026-11-02T00:00:00Z", "advertised": 12, "allocated": 2}
    assert {"at": "2026-11-03T00:00:00Z", "advertised": 12, "allocated": 3} in points
    assert points[-1] == {"at": "2026-11-16T00:00:00Z", "advertised": 12, "allocated": 3}
    weekly = review["series"]["weekly"]
    assert len(weekly) == 8
    assert weekly[-1]["week_start"] == "2026-11-09T00:00:00Z"
    assert weekly[-1]["leaked_device_hours"] == review["totals"]["leaked_device_hours"]
    assert weekly[-2]["allocated_device_hours"] == review["totals"]["previous_allocated_device_hours"]
    assert all(w["allocated_device_hours"] == 0 for w in weekly[:-2])


def test_csv_rows_match_the_review(review: dict[str, Any]) -> None:
    rows = review_csv_rows(review)
    assert rows[0] == CSV_HEADER and CSV_HEADER[0] == "week"
    assert len(rows) == 1 + 1 + 2 + 2 + 1
    # Every row says its week (the Monday), so several weeks' CSVs concatenate.
    assert {r[0] for r in rows[1:]} == {review["week"]["start"][:10]}
    by_key = {(r[1], r[2]): r for r in rows[1:]}
    assert all(len(r) == len(CSV_HEADER) for r in rows)
    total = by_key[("total", "")]
    for i, field in enumerate(CSV_HEADER[3:-1], start=3):
        assert float(total[i]) == pytest.approx(review["totals"][field], abs=0.005)
    for r in review["by_namespace"]:
        assert float(by_key[("namespace", r["namespace"])][3]) == pytest.approx(r["allocated_device_hours"], abs=0.005)
    for r in review["by_model"]:
        assert float(by_key[("model", r["model"])][6]) == pytest.approx(r["leaked_device_hours"], abs=0.005)
    claim_row = by_key[("claim", "analytics/report")]
    assert claim_row[-1] == "orphaned-allocation"
    assert float(claim_row[6]) == pytest.approx(133.75, rel=0.01)


def test_percent() -> None:
    assert percent(0.625) == "62.5%"
    assert percent(None) == "n/a"


def test_reproducible_from_history_and_arguments_only() -> None:
    snaps = two_weeks()
    later = [*snaps, (END + 3 * D, snaps[-1][1])]
    first = weekly_review(MemoryHistory(snaps), WEEK)
    assert weekly_review(MemoryHistory(snaps), WEEK) == first
    assert weekly_review(MemoryHistory(later, as_of=END), WEEK) == first


def test_partial_week_is_cut_at_as_of() -> None:
    h = MemoryHistory(two_weeks(), as_of=WEEK + 2 * D)
    r = weekly_review(h, WEEK)
    assert r["week"]["partial"] is True
    assert r["week"]["end"] == "2026-11-11T00:00:00Z"
    # train: 2 × 48 h; report: 1 × 24 h.
    assert r["totals"]["allocated_device_hours"] == pytest.approx(120.0, rel=0.01)


def test_threshold_changes_leaked_hours() -> None:
    r = weekly_review(MemoryHistory(two_weeks()), WEEK, Thresholds(orphaned=6 * 3600))
    assert r["totals"]["leaked_device_hours"] == pytest.approx(144 - 16, rel=0.01)


def test_failing_pod_leak_ends_when_the_pod_recovers() -> None:
    start = WEEK + D
    crashing = b.pod(
        "research",
        "flaky-0",
        start,
        claims=(("gpu", {"claim": "flaky"}),),
        node_name="node-a",
        phase="Running",
        conditions=b.stuck_conditions(start, True),
        container_state=b.state_waiting("CrashLoopBackOff"),
        restart_count=30,
        last_state=b.state_terminated(start + 8 * H - 60 * timedelta(seconds=1), start + 8 * H, exit_code=1),
    )
    recovered = running("research", "flaky-0", "flaky", "node-a", start + 8 * H + 5 * timedelta(minutes=1))
    claim = held("research", "flaky", "node-a", ["gpu-7"], start, [crashing])
    snaps = [
        (PREV, inventory()),
        (start, [*inventory(), claim, crashing]),
        (start + 8 * H + 10 * timedelta(minutes=1), [*inventory(), claim, recovered]),
        (END, [*inventory(), claim, recovered]),
    ]
    r = weekly_review(MemoryHistory(snaps), WEEK)
    # Not running from its start until the recovery snapshot (8 h 10 min), flagged after 6 h.
    assert r["totals"]["leaked_device_hours"] == pytest.approx(2 + 10 / 60, rel=0.01)
    assert r["top_offenders"][0]["reason"] == "held-by-failing-pod"


def test_allocation_stretch_uses_the_allocation_timestamp() -> None:
    claim = held("research", "x", "node-a", ["gpu-0"], PREV + H, [])
    stretches = allocation_stretches([Version(PREV + 5 * H, claim), Version(PREV + 9 * H, None)], END)
    assert stretches == [(PREV + H, PREV + 9 * H, (("gpu.nvidia.com", "node-a", "gpu-0"),))]


def test_naive_week_start_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone"):
        weekly_review(MemoryHistory(two_weeks()), datetime(2026, 11, 9))  # noqa: DTZ001


def test_slices_advertise_from_their_creation_even_before_history_began() -> None:
    from datetime import UTC, datetime, timedelta

    from demo import builders as bb
    from domain.cluster.state import MemoryHistory
    from domain.reports.capacity import weekly_review

    week = datetime(2026, 11, 16, tzinfo=UTC)
    created = week - timedelta(days=30)
    first_seen = week + timedelta(days=3)
    slice_ = bb.resource_slice("n0", bb.gpu_devices("n0", 2), created=created)
    history = MemoryHistory([(first_seen, [slice_]), (week + timedelta(days=7), [slice_])])
    review = weekly_review(history, week)
    # Two devices for the whole week, not only from the first snapshot on.
    assert review["totals"]["advertised_device_hours"] == pytest.approx(2 * 7 * 24)


def test_inventory_timeline_recounts_changed_pools_to_the_same_counts_as_a_full_recount() -> None:
    """Slices change in one pool at a time (republished, split, retired, a node added); the
    timeline recounts only those pools, and must agree with counting every device at each change."""
    node_a, node_b = b.gpu_devices("node-a", 8, b.A100_40GB), b.gpu_devices("node-b", 4, b.H100_80GB)
    a = b.resource_slice("node-a", node_a)
    b1 = b.resource_slice("node-b", node_b)
    # Created when first seen: a slice first seen later counts from its creation (tested above).
    a_next = [
        b.resource_slice("node-a", node_a[:6], generation=2, slice_count=2, name="node-a-g2-0", created=PREV + H),
        b.resource_slice("node-a", node_a[6:], generation=2, slice_count=2, name="node-a-g2-1", created=PREV + 2 * H),
    ]
    node_c = b.resource_slice("node-c", b.gpu_devices("node-c", 2, b.H100_80GB), created=PREV + 3 * H)
    fabric = b.resource_slice(
        None, b.gpu_devices("fabric", 3, b.A100_40GB), pool="fabric", all_nodes=True, created=PREV + 3 * H
    )
    stages = [
        (PREV - D, [a, b1]),
        (PREV + H, [a, a_next[0], b1]),  # mid-republish: only the newest generation counts
        (PREV + 2 * H, [*a_next, b1]),
        (PREV + 3 * H, [*a_next, b1, node_c, fabric]),
        (PREV + 4 * H, [*a_next, node_c, fabric]),
        (PREV + 5 * H, [a_next[1], node_c]),
    ]
    history = MemoryHistory(stages)
    timeline = InventoryTimeline.build(history, PREV)
    assert timeline.times == [PREV, *(at for at, _ in stages[1:])]
    for t in timeline.times:
        live = {s["metadata"]["uid"]: s for s in next(objs for at, objs in reversed(stages) if at <= t)}
        full: Counter[str] = Counter()
        for device in advertised_devices(ClusterState(t, {"ResourceSlice": live})):
            full[str(device.attribute("productName"))] += 1
        assert list(timeline.at(t).items()) == list(full.items()), t
    assert timeline.at(PREV + 5 * H) == Counter({A100: 2, H100: 2})
