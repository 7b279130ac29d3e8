"""The Prometheus exposition: it parses, every family has HELP and TYPE, and the numbers are right."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo import builders as b
from domain.cluster.state import MemoryHistory
from domain.reports.metrics import CollectionHealth, escape_label_value, render_metrics

T0 = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)
NS = "ml"

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(rf"^({NAME})(\{{(?:{LABEL})(?:,{LABEL})*\}})? (\S+)$")
VALUE = re.compile(r"^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|NaN|[+-]Inf)$")


def parse(text: str) -> dict[str, dict[str, Any]]:
    """A strict little parser: families with their HELP, TYPE and samples ``{labels: value}``."""
    assert text.endswith("\n")
    families: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        assert line, "blank lines are not expected"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in families, f"{name} declared twice"
            assert help_text
            families[name] = {"help": help_text, "type": None, "samples": {}}
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert families[name]["type"] is None
            assert kind in ("gauge", "counter", "histogram", "summary", "untyped")
            families[name]["type"] = kind
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert VALUE.match(value), line
        family = next(
            (f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in families),
            None,
        )
        assert family is not None, f"{name} has no HELP/TYPE"
        assert families[family]["type"] is not None
        if family != name:
            assert families[family]["type"] == "histogram"
        samples = families[family]["samples"]
        key = (name, labels or "")
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    for name, family in families.items():
        assert name.startswith("claimline_"), name
        assert family["type"], f"{name} has no TYPE"
        if family["type"] == "counter":
            assert name.endswith("_total")
    return families


def value(families: dict[str, dict[str, Any]], name: str, **labels: str) -> float:
    family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in families else name
    rendered = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""
    return families[family]["samples"][(name, rendered)]


def cluster() -> MemoryHistory:
    slice_at = T0 - 2 * H
    objs: list[dict[str, Any]] = [
        b.namespace(NS),
        b.device_class(),
        b.claim_template(NS, "gpu", [b.request()]),
        b.node("node-a", T0 - 90 * 24 * H),
        b.node("node-b", T0 - 90 * 24 * H),
        b.resource_slice("node-a", b.gpu_devices("node-a", 8), created=slice_at),
        b.resource_slice("node-b", b.gpu_devices("node-b", 4, b.H100_80GB), created=slice_at),
    ]
    # A healthy Pod: created, allocated 30 s later, devices prepared 12 s after that.
    ok = b.pod(
        NS,
        "ok-0",
        T0,
        node_name="node-a",
        phase="Running",
        conditions=[
            b.scheduled(T0 + 30 * timedelta(seconds=1)),
            b.ready_to_start(T0 + 42 * timedelta(seconds=1)),
            b.ready(T0 + M),
        ],
        container_state=b.state_running(T0 + M),
    )
    ok_claim = b.template_claim(
        objs[2],
        ok,
        allocated=[("gpu", "node-a", "gpu-0")],
        allocated_at=T0 + 30 * timedelta(seconds=1),
        reserved_for=[ok],
    )
    # A Pod whose preparation keeps failing.
    stuck = b.pod(NS, "stuck-0", T0, node_name="node-b", conditions=b.stuck_conditions(T0 + M, False))
    stuck_claim = b.template_claim(
        objs[2], stuck, allocated=[("gpu", "node-b", "gpu-1")], allocated_at=T0 + M, reserved_for=[stuck]
    )
    ev = b.event(
        stuck,
        "FailedPrepareDynamicResources",
        'Failed to prepare dynamic resources: "quoted" \\ path\nsecond line',
        T0 + 2 * M,
        T0 + 50 * M,
        count=7,
    )
    # A claim parked for hours with nobody reserving it: a leak.
    parked = b.claim(
        NS, "parked", [b.request(count=2)], T0, allocated=[("gpu", "node-a", "gpu-6"), ("gpu", "node-a", "gpu-7")]
    )
    pending = b.claim(NS, "pending", [b.request()], T0 + 50 * M)
    snapshot = [*objs, ok, ok_claim, stuck, stuck_claim, ev, parked, pending]
    return MemoryHistory([(T0 - H, objs), (T0 + 3 * H, snapshot)])


@pytest.fixture(scope="module")
def text() -> str:
    return render_metrics(cluster())


@pytest.fixture(scope="module")
def families(text: str) -> dict[str, dict[str, Any]]:
    return parse(text)


def test_text_parses_with_help_and_type(families: dict[str, dict[str, Any]]) -> None:
    assert {
        "claimline_devices_advertised",
        "claimline_devices_allocated",
        "claimline_inventory_age_seconds",
        "claimline_claims",
        "claimline_claim_boundaries",
        "claimline_allocation_wait_seconds",
        "claimline_preparation_seconds",
        "claimline_preparation_failures_total",
        "claimline_runtime_injection_failures",
        "claimline_flagged_claims",
        "claimline_flagged_device_seconds",
    } <= set(families)


def test_inventory_gauges(families: dict[str, dict[str, Any]]) -> None:
    where = {"driver": "gpu.nvidia.com", "pool": "node-a", "node": "node-a"}
    assert value(families, "claimline_devices_advertised", **where) == 8
    assert value(families, "claimline_devices_allocated", **where) == 3  # ok-0's and parked's two
    assert value(families, "claimline_devices_allocated", **{**where, "pool": "node-b", "node": "node-b"}) == 1
    # Slices unchanged since the first snapshot, four hours before as_of.
    assert value(families, "claimline_inventory_age_seconds", driver="gpu.nvidia.com", pool="node-a") == 4 * 3600


def test_claim_states_and_boundaries(families: dict[str, dict[str, Any]]) -> None:
    assert value(families, "claimline_claims", state="reserved") == 2
    assert value(families, "claimline_claims", state="allocated") == 1
    assert value(families, "claimline_claims", state="pending") == 1
    assert value(families, "claimline_claims", state="deleting") == 0
    assert value(families, "claimline_claim_boundaries", boundary="preparation", state="failed") == 1
    assert value(families, "claimline_claim_boundaries", boundary="runtime", state="ok") == 1
    total = sum(v for (n, lab), v in families["claimline_claim_boundaries"]["samples"].items() if "allocation" in lab)
    assert total == 2  # one per claim of a live Pod


def test_histograms(families: dict[str, dict[str, Any]]) -> None:
    wait = "claimline_allocation_wait_seconds"
    assert value(families, f"{wait}_count") == 3  # 30 s, 60 s, and parked's 0 s (allocated at creation)
    assert value(families, f"{wait}_bucket", le="30") == 2
    assert value(families, f"{wait}_sum") == 90
    prep = "claimline_preparation_seconds"
    assert value(families, f"{prep}_count") == 1
    assert value(families, f"{prep}_sum") == 12
    assert value(families, f"{prep}_bucket", le="10") == 0
    assert value(families, f"{prep}_bucket", le="30") == 1
    buckets = [v for (n, _), v in families[prep]["samples"].items() if n.endswith("_bucket")]
    assert buckets == sorted(buckets)
    assert buckets[-1] == value(families, f"{prep}_count")


def test_preparation_failures_and_leaks(families: dict[str, dict[str, Any]]) -> None:
    assert value(families, "claimline_preparation_failures_total", namespace=NS, node="node-b") == 7
    assert value(families, "claimline_flagged_claims", namespace=NS, reason="unreserved-allocation") == 1
    assert value(families, "claimline_flagged_claims", namespace="(other)", reason="orphaned-allocation") == 0
    # Device-seconds, Prometheus' base unit: 2 devices for 3 hours.
    assert value(
        families, "claimline_flagged_device_seconds", namespace=NS, reason="unreserved-allocation"
    ) == pytest.approx(2 * 3 * 3600, rel=0.01)


def test_label_values_are_escaped() -> None:
    assert escape_label_value('a "b" \\ c\nd') == 'a \\"b\\" \\\\ c\\nd'
    weird = b.pod('we"ird', "p", T0)
    ev = b.event(weird, "FailedPrepareDynamicResources", "x", T0, host='n\\o"de\nx')
    text = render_metrics(MemoryHistory([(T0, [weird, ev])]))
    families = parse(text)
    assert 'claimline_preparation_failures_total{namespace="we\\"ird",node="n\\\\o\\"de\\nx"} 1' in text
    assert len(families["claimline_preparation_failures_total"]["samples"]) == 1


def test_reproducible(text: str) -> None:
    assert render_metrics(cluster()) == text


def test_empty_cluster_still_declares_families() -> None:
    families = parse(render_metrics(MemoryHistory([(T0, [])])))
    assert families["claimline_devices_advertised"]["samples"] == {}
    assert value(families, "claimline_flagged_claims", namespace="(other)", reason="stuck-deletion") == 0


def test_models_pending_pods_and_preparation_by_node(families: dict[str, dict[str, Any]]) -> None:
    a100 = {"driver": "gpu.nvidia.com", "model": "NVIDIA A100-SXM4-40GB"}
    h100 = {**a100, "model": "NVIDIA H100 80GB HBM3"}
    assert value(families, "claimline_model_devices_advertised", **a100) == 8
    assert value(families, "claimline_model_devices_allocated", **a100) == 3
    assert value(families, "claimline_model_devices_advertised", **h100) == 4
    assert value(families, "claimline_model_devices_allocated", **h100) == 1
    # stuck-0: its one claim failed preparation on node-b; ok-0 is running, so it is not pending.
    assert value(families, "claimline_preparation_failed_claims", node="node-b") == 1
    failed = {"boundary": "preparation", "namespace": NS, "reason": "preparation-failed"}
    assert value(families, "claimline_pending_pods", **failed) == 1
    assert value(families, "claimline_pending_pod_max_age_seconds", **failed) == 3 * 3600
    assert len(families["claimline_pending_pods"]["samples"]) == 1


def test_pending_age_is_the_oldest_pod_of_a_reason() -> None:
    objs = [b.namespace(NS), b.device_class(), b.node("node-a", T0 - 24 * H)]
    old = b.pod(NS, "old", T0, claims=[("gpu", {"claim": "old-gpu"})])
    new = b.pod(NS, "new", T0 + H, claims=[("gpu", {"claim": "new-gpu"})])
    claims = [b.claim(NS, "old-gpu", [b.request()], T0), b.claim(NS, "new-gpu", [b.request()], T0 + H)]
    families = parse(render_metrics(MemoryHistory([(T0 + 2 * H, [*objs, old, new, *claims])])))
    [(key, count)] = families["claimline_pending_pods"]["samples"].items()
    assert count == 2
    assert families["claimline_pending_pod_max_age_seconds"]["samples"][("claimline_pending_pod_max_age_seconds", key[1])] == 2 * 3600


def test_inventory_warnings_by_kind() -> None:
    objs = [b.namespace("gpu-ops", admin_access=True), b.namespace(NS)]
    families = parse(render_metrics(MemoryHistory([(T0, objs)])))
    assert value(families, "claimline_inventory_warnings", kind="admin-access-namespace") == 1
    assert value(families, "claimline_inventory_warnings", kind="stale-inventory") == 0


def test_collection_health_families() -> None:
    assert "claimline_collection_" not in render_metrics(cluster())
    health = CollectionHealth(last_run_at=T0 + 4 * H, last_run_status="failed", failures_since_success=2)
    families = parse(render_metrics(cluster(), collection=health))
    assert value(families, "claimline_collection_last_run_timestamp_seconds") == (T0 + 4 * H).timestamp()
    assert value(families, "claimline_collection_last_run_status", status="failed") == 1
    assert value(families, "claimline_collection_last_run_status", status="ok") == 0
    assert value(families, "claimline_collection_failures_since_success") == 2
    # The usable snapshot the rest describes stays the one before the failures.
    assert value(families, "claimline_as_of_timestamp_seconds") == (T0 + 3 * H).timestamp()


@pytest.mark.django_db
def test_collection_health_counts_failures_since_the_newest_usable_snapshot() -> None:
    from collector.history_reader import collection_health
    from collector.models import Cluster, Snapshot

    c = Cluster.objects.create(name="c1")
    for i, status in enumerate(["failed", "ok", "partial", "failed", "failed", "running"]):
        Snapshot.objects.create(cluster=c, at=T0 + i * M, started=T0 + i * M, source="test", status=status)
    health = collection_health(c, T0 + 2 * M)
    assert health == CollectionHealth(last_run_at=T0 + 4 * M, last_run_status="failed", failures_since_success=2)
    empty = Cluster.objects.create(name="c2")
    assert collection_health(empty, T0) == CollectionHealth(None, None, 0)


def test_pending_pods_agree_with_explain_on_the_demo_story() -> None:
    from demo.story import DEMO_BASE, demo_snapshots
    from domain.boundaries.judgement import is_terminal
    from domain.verdicts.explain import explain

    history = MemoryHistory(demo_snapshots(DEMO_BASE))
    expected: dict[str, float] = {}
    for pod in history.state.of_kind("Pod"):
        if is_terminal(pod) or not (pod.get("spec") or {}).get("resourceClaims"):
            continue
        verdict = explain(history, pod["metadata"]["namespace"], pod["metadata"]["name"])["verdict"]
        if verdict["boundary"] is not None:
            key = (
                f'{{boundary="{verdict["boundary"]}",namespace="{pod["metadata"]["namespace"]}",'
                f'reason="{verdict["reason"]}"}}'
            )
            expected[key] = expected.get(key, 0) + 1
    families = parse(render_metrics(history))
    got = {labels: v for (_, labels), v in families["claimline_pending_pods"]["samples"].items()}
    assert got == expected
    assert len(expected) >= 3  # the story fails allocation, preparation and runtime


def test_inventory_age_of_a_pool_follows_its_newest_slice() -> None:
    devices = b.gpu_devices("node-a", 8)
    old = b.resource_slice("node-a", devices[:4], slice_count=2, name="node-a-0")
    new = b.resource_slice("node-a", devices[4:], slice_count=2, name="node-a-1")
    changed = b.resource_slice("node-a", devices[4:7], slice_count=2, name="node-a-1")
    node = b.node("node-a", T0 - 24 * H)
    history = MemoryHistory([(T0, [node, old, new]), (T0 + 3 * H, [node, old, changed])], as_of=T0 + 4 * H)
    families = parse(render_metrics(history))
    assert value(families, "claimline_devices_advertised", driver="gpu.nvidia.com", pool="node-a", node="node-a") == 7
    assert value(families, "claimline_inventory_age_seconds", driver="gpu.nvidia.com", pool="node-a") == 3600


def test_the_layer_finds_every_preparation_failure_reason_by_its_mark() -> None:
    # /metrics asks the database for the live Events containing the mark instead of decoding every one.
    from derived.reports import PREPARE_FAILURE_MARK
    from domain.boundaries.judgement import PREPARE_FAILURE_REASONS

    assert all(PREPARE_FAILURE_MARK in reason for reason in PREPARE_FAILURE_REASONS)


def test_namespaces_beyond_the_cap_are_added_up_as_other() -> None:
    """Bounded cardinality: the namespaces with the most waiting Pods (ties by name) are named, the
    rest share namespace="(other)", its count the sum and its age the oldest."""
    objs: list[dict[str, Any]] = [b.device_class(), b.node("node-a", T0 - 24 * H)]
    for i, (ns, pods) in enumerate({"big": 3, "mid": 2, "small-a": 1, "small-b": 1}.items()):
        objs.append(b.namespace(ns))
        for j in range(pods):
            created = T0 + (i + j) * M
            objs.append(b.pod(ns, f"p{j}", created, claims=[("gpu", {"claim": f"c{j}"})]))
            objs.append(b.claim(ns, f"c{j}", [b.request()], created))
    history = MemoryHistory([(T0 + H, objs)])
    families = parse(render_metrics(history, namespace_cap=2))
    pending = {k[1]: v for k, v in families["claimline_pending_pods"]["samples"].items()}
    namespaces = {re.search(r'namespace="([^"]*)"', labels).group(1) for labels in pending}  # type: ignore[union-attr]
    assert namespaces == {"big", "mid", "(other)"}
    where = {"boundary": "inventory", "reason": "no-inventory"}
    assert value(families, "claimline_pending_pods", namespace="(other)", **where) == 2
    # small-a's Pod (created at T0 + 2 min) is the older of the two added up.
    assert value(families, "claimline_pending_pod_max_age_seconds", namespace="(other)", **where) == 58 * 60
    assert 'namespace="(other)"' in families["claimline_pending_pods"]["help"]
    assert "the 2 namespaces with the most" in families["claimline_pending_pods"]["help"]
    # A cap of 0 names none: every Pod is in the other bucket.
    none = parse(render_metrics(history, namespace_cap=0))
    assert value(none, "claimline_pending_pods", namespace="(other)", **where) == 7


def test_served_families_age_and_dashboard_link() -> None:
    from domain.reports.metrics import Served

    as_of = T0 + 3 * H
    served = Served(as_of, now=as_of + 45 * timedelta(seconds=1), dashboard_url="https://c.example/c/lab/")
    families = parse(render_metrics(cluster(), served=served))
    assert value(families, "claimline_as_of_timestamp_seconds") == as_of.timestamp()
    assert value(families, "claimline_snapshot_age_seconds") == 45
    assert value(families, "claimline_dashboard_info", url="https://c.example/c/lab/") == 1


def test_promtool_lints_the_exposition_clean() -> None:
    """`promtool check metrics` (Debian's prometheus package): base units (device-seconds, not
    device-hours), _total counters, HELP everywhere."""
    import shutil
    import subprocess

    from demo.story import DEMO_BASE, demo_snapshots
    from domain.reports.metrics import Served

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    history = MemoryHistory(demo_snapshots(DEMO_BASE))
    health = CollectionHealth(last_run_at=history.as_of, last_run_status="ok", failures_since_success=0)
    served = Served(history.as_of, now=history.as_of, collection=health, dashboard_url="https://c.example/c/demo/")
    text = render_metrics(history, served=served)
    assert "claimline_flagged_device_seconds" in text
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
