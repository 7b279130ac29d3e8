"""What would make a waiting Pod run, and when (issue 20 item 8): the domain's estimate and suggestions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.verdicts.estimates import MIN_SPANS, duration, estimate_from, percentile
from domain.verdicts.explain import explain
from domain.verdicts.suggestions import comparisons, nearest
from tests.test_verdicts import ATTR, CREATED, MEM, NS, T0, M

H = timedelta(hours=1)
UNSCHEDULABLE = "0/1 nodes are available: 1 cannot allocate all claims."

Obj = dict[str, Any]


def base(gpus: int = 2, nodes: tuple[str, ...] = ("worker-0",), **kwargs: Any) -> list[Obj]:
    """The platform; a claim nothing uses makes every dump list claims, so an import records the ones gone."""
    out: list[Obj] = [b.namespace(NS), b.device_class(), b.claim_template(NS, "one-gpu", [b.request()])]
    out.append(b.claim(NS, "spare", [b.request()], CREATED))
    for name in nodes:
        out += [b.node(name, CREATED), b.resource_slice(name, b.gpu_devices(name, gpus, **kwargs), created=CREATED)]
    return out


def running(name: str, device: str, started: datetime, job: str = "train") -> list[Obj]:
    """A Pod of ``job`` holding ``device`` of worker-0 since ``started``, with its generated claim."""
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(
        NS,
        name,
        started - M,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name="worker-0",
        phase="Running",
        conditions=b.running_conditions(started, started + M),
        container_state=b.state_running(started + M),
        owner=("Job", job),
    )
    claim = b.template_claim(
        tpl, pod, allocated=[("gpu", "worker-0", device)], allocated_at=started, reserved_for=[pod]
    )
    return [pod, claim]


def waiting(name: str = "train-next", job: str = "train", created: datetime = T0 - 10 * M) -> list[Obj]:
    tpl = b.claim_template(NS, "one-gpu", [b.request()])
    pod = b.pod(
        NS,
        name,
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        conditions=[b.unschedulable(created + M, UNSCHEDULABLE)],
        owner=("Job", job),
    )
    return [pod, b.template_claim(tpl, pod)]


def story(past: int, job: str = "train", hours: float = 3.0) -> list[tuple[datetime, list[Obj]]]:
    """``past`` finished holds of ``job`` (each ``hours`` long, one after another on gpu-1), then at T0
    two holders of the same Job (since 2h10m and 1h ago) and a Pod waiting for a GPU."""
    snapshots: list[tuple[datetime, list[Obj]]] = [(CREATED, base())]
    start = T0 - timedelta(days=3)
    for i in range(past):
        objects = running(f"{job}-old-{i}", "gpu-1", start, job=job)
        snapshots.append((start + M, base() + objects))
        start += timedelta(hours=hours)
        snapshots.append((start, base()))
        start += M
    now = base() + running("train-a", "gpu-0", T0 - (2 * H + 10 * M)) + running("train-b", "gpu-1", T0 - H)
    snapshots.append((T0, now + waiting()))
    return snapshots


def verdict(snapshots: list[tuple[datetime, list[Obj]]], name: str = "train-next") -> dict[str, Any]:
    return explain(MemoryHistory(snapshots), NS, name)["verdict"]  # type: ignore[no-any-return]


# --- estimates ----------------------------------------------------------------------------------------


def test_thin_history_gives_no_estimate_and_says_why() -> None:
    v = verdict(story(MIN_SPANS - 1))
    assert v["reason"] == "devices-in-use"
    assert "estimate" not in v
    assert v["no_estimate"].startswith(
        "as of 2026-11-20 12:00 UTC the 2 holders have held their devices up to 2h10m; no estimate: too little "
        "history for ml/train-"
    )
    assert (
        "(finished holds: claims of Job ml/train: 2, claims from template ml/one-gpu: 2, "
        "claims in the namespace of ml/train-" in v["no_estimate"]
    )
    assert v["no_estimate"].endswith(": 2; at least 3 are needed)")


def test_enough_history_estimates_from_the_holders_kin_and_shows_the_basis() -> None:
    v = verdict(story(4))
    estimate = v["estimate"]
    assert v["reason"] == "devices-in-use" and "no_estimate" not in v
    # train-a has held its GPU 2h10m of the usual 3h: free at 12:50, 50 minutes after the snapshot
    assert estimate["at"] == "2026-11-20T12:50:00Z"
    assert estimate["in_seconds"] == 50 * 60
    assert estimate["basis"] == (
        "claims of Job ml/train usually held them 3h (median of 4 finished since 2026-10-21, p75 3h)"
    )
    assert estimate["summary"] == (
        "as of 2026-11-20 12:00 UTC the 2 holders have held their devices up to 2h10m; " + estimate["basis"] + "; "
        "the first is likely free in ~50 min (about 2026-11-20 12:50 UTC) on worker-0"
    )
    first, second = estimate["holders"]
    assert first["claim"].startswith("ml/train-a-gpu-") and first["held_seconds"] == 130 * 60
    assert (first["spans"], first["median_seconds"], first["p75_seconds"]) == (4, 3 * 3600, 3 * 3600)
    assert first["likely_free"] == "2026-11-20T12:50:00Z"
    assert second["likely_free"] == "2026-11-20T14:00:00Z"
    assert estimate["lacking"] == 1 and estimate["node"] == "worker-0"


def test_the_stored_basis_is_dated_as_of_the_time_asked() -> None:
    snapshots = story(4)
    history = MemoryHistory(snapshots)
    wait = explain(history, NS, "train-next")["verdict"]["wait"]
    assert wait["lacking"] == 1 and [h["median_seconds"] for h in wait["holders"]] == [3 * 3600, 3 * 3600]
    later = estimate_from(wait, T0 + 40 * M)["estimate"]
    assert (later["at"], later["in_seconds"]) == ("2026-11-20T12:50:00Z", 10 * 60)
    # past train-a's median (3h) and p75 (3h): it has no expected end, so train-b dates the estimate
    past = estimate_from(wait, T0 + 55 * M)["estimate"]
    assert past["at"] == "2026-11-20T14:00:00Z" and past["summary"].startswith(
        "as of 2026-11-20 12:55 UTC the 2 holders have held their devices up to 3h05m"
    )
    assert "the first is likely free in ~1h05m (about 2026-11-20 14:00 UTC)" in past["summary"]


def test_other_workloads_history_falls_back_to_the_template_then_says_so() -> None:
    # The finished holds belong to another Job: the holders' own Job has none, so their template is the basis.
    v = verdict(story(3, job="sweep"))
    assert "claims from template ml/one-gpu usually held them 3h (median of 3" in v["estimate"]["basis"]


def test_a_holder_past_three_quarters_of_its_kin_has_no_expected_end() -> None:
    snapshots = story(4, hours=1.0)  # past holds of 1 h: both holders (2h10m, 1h) outlived the p75
    v = verdict(snapshots)
    assert "estimate" not in v
    assert "longer than 3 in 4 of claims of Job ml/train (p75 1h of 4)" in v["no_estimate"]


def test_duration_and_percentile() -> None:
    assert [duration(s) for s in (0, 50 * 60, 130 * 60, 3 * 3600, 50 * 3600)] == [
        "0 min",
        "50 min",
        "2h10m",
        "3h",
        "2d2h",
    ]
    assert percentile([1, 2, 3, 4], 0.75) == 3.25 and percentile([5], 0.75) == 5


# --- suggestions --------------------------------------------------------------------------------------


def unscheduled_with(requests: list[Obj], constraints: list[Obj] | None = None) -> list[Obj]:
    tpl = (
        b.claim_template(NS, "t", requests, constraints=constraints)
        if constraints
        else b.claim_template(NS, "t", requests)
    )
    pod = b.pod(
        NS,
        "train",
        T0 - 10 * M,
        claims=[("gpu", {"template": "t"})],
        conditions=[b.unschedulable(T0 - 9 * M, UNSCHEDULABLE)],
    )
    return [tpl, pod, b.template_claim(tpl, pod)]


def test_selector_relaxed_to_the_nearest_advertised_capacity() -> None:
    objects = base(4, nodes=("a-0", "a-1"), model=b.A100_40GB) + unscheduled_with(
        [b.request(selectors=[f"{MEM}.compareTo(quantity('48Gi')) >= 0"])]
    )
    v = verdict([(T0, objects)], "train")
    assert v["reason"] == "selector-unsatisfiable"
    assert v["suggestion"] == {
        "change": "8 devices have memory 40Gi; request gpu asks for memory >= 48Gi: with memory >= 40Gi, 2 nodes fit (a-0, a-1)",
        "would_match": 8,
    }
    assert v["suggestions"][0]["kind"] == "selector" and v["suggestions"][0]["nodes"] == ["a-0", "a-1"]


def test_string_attribute_relaxed_to_the_most_common_advertised_value() -> None:
    objects = base(2, model=b.A100_40GB) + unscheduled_with([b.request(selectors=[f"{ATTR}.productName == 'H200'"])])
    v = verdict([(T0, objects)], "train")
    assert v["reason"] == "selector-unsatisfiable"
    assert v["suggestion"]["change"].startswith("2 devices have productName NVIDIA A100")
    assert v["suggestion"]["change"].endswith("worker-0 fits")


def test_count_lowered_to_the_largest_that_fits() -> None:
    objects = base(4, nodes=("a-0",)) + base(2, nodes=("a-1",))[3:] + unscheduled_with([b.request(count=6)])
    v = verdict([(T0, objects)], "train")
    assert v["reason"] == "insufficient-devices"
    assert v["suggestion"] == {"change": "with count 4 instead of 6, a-0 fits", "would_match": 6}


def test_distinct_attribute_dropped_when_the_devices_do_not_go_together() -> None:
    # Two GPUs per node share one productName: distinct productNames never go together.
    objects = base(2, nodes=("a-0", "a-1")) + unscheduled_with(
        [b.request(count=2)], constraints=[b.distinct_attribute("gpu.nvidia.com/productName")]
    )
    v = verdict([(T0, objects)], "train")
    assert v["reason"] == "insufficient-devices"
    assert v["suggestions"][0]["change"] == (
        "with `distinctAttribute: gpu.nvidia.com/productName` dropped, 2 nodes fit (a-0, a-1)"
    )
    assert v["suggestion"]["change"] == v["suggestions"][0]["change"]


def test_no_suggestion_when_nothing_near_would_fit() -> None:
    objects = base(2) + unscheduled_with([b.request(selectors=["device.attributes['gpu.nvidia.com'].bogus == 'x'"])])
    v = verdict([(T0, objects)], "train")
    assert v["reason"] == "selector-unsatisfiable"
    assert "suggestion" not in v and "suggestions" not in v


def test_comparisons_found_and_rewritten() -> None:
    expr = f"{MEM}.compareTo(quantity('48Gi')) > 0 && {ATTR}.index < 3 && {MEM}.isLessThan(quantity('1Ti'))"
    found = comparisons(expr)
    assert [(c.name, c.op, c.kind, c.strict) for c in found] == [
        ("memory", ">=", "quantity", True),
        ("index", "<=", "int", True),
        ("memory", "<=", "quantity", True),
    ]
    assert nearest(found[1], [1, 3, 5]) == 3
    assert (
        found[1].rewritten(3)
        == f"{MEM}.compareTo(quantity('48Gi')) > 0 && {ATTR}.index <= 3 && {MEM}.isLessThan(quantity('1Ti'))"
    )
