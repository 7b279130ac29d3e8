"""demo.builders, demo.story and demo.synthetic: shapes, determinism, the story's consistency, scale."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest

from demo import builders as b
from demo import story_gangs as gangs
from demo.story import (
    DEMO_BASE,
    DEMO_EXPECTATIONS,
    DEMO_INTENTIONALLY_MISSING,
    STAGE_COUNT,
    demo_stages,
    stage_times,
)
from demo.synthetic import generation_time, synthetic_cluster, synthetic_list_bytes

T = DEMO_BASE
NAMESPACED = {"Pod", "Event", "ResourceClaim", "ResourceClaimTemplate", "PodGroup", "Workload"}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _key(obj: dict[str, Any]) -> str:
    m = obj["metadata"]
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {_key(o): o for o in objects if o["kind"] == kind}


def _timestamps(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _timestamps(v)]
    if isinstance(value, list):
        return [t for v in value for t in _timestamps(v)]
    return [value] if isinstance(value, str) and RFC3339.match(value) else []


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


# --- builders ----------------------------------------------------------------------------------


def test_uids_are_deterministic_and_salted_by_incarnation() -> None:
    assert b.object_uid("Pod", "ns", "p") == b.object_uid("Pod", "ns", "p")
    assert b.object_uid("Pod", "ns", "p") != b.object_uid("Pod", "other", "p")
    assert b.object_uid("Pod", "ns", "p") != b.object_uid("ResourceClaim", "ns", "p")
    assert b.object_uid("Pod", "ns", "p", incarnation=1) != b.object_uid("Pod", "ns", "p")

    first = b.pod("ns", "p", T, node_name="n", phase="Running")
    assert first == b.pod("ns", "p", T, node_name="n", phase="Running")
    again = b.pod("ns", "p", T + timedelta(minutes=5), incarnation=1)
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    # The recreated pod's generated claim gets a new name too, as in a real cluster.
    assert (
        again["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        != first["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    )


@pytest.mark.parametrize(
    ("pod_name", "pod_uid", "expected"),
    [
        ("gpu-check", "74665b38-1ed0-a60c-0d51-488c7a407038", "gpu-check-gpu-74665"),
        ("gpu-check", "19bcd675-5daf-773f-7195-00e52a69a973", "gpu-check-gpu-19bcd"),
        ("dashboard-api-0", "5df0e747-c34d-e7af-ddbb-85428de2da79", "dashboard-api-0-gpu-5df0e"),
    ],
)
def test_generated_claim_names_follow_the_scenarios(pod_name: str, pod_uid: str, expected: str) -> None:
    assert b.generated_claim_name(pod_name, "gpu", pod_uid) == expected


def test_generated_claim_names_fit_in_63_characters() -> None:
    name = b.generated_claim_name("a" * 60, "accelerator", "0123456789")
    assert len(name) <= 63 and name.endswith("01234")


def test_template_claim_is_owned_by_its_pod() -> None:
    tpl = b.claim_template("ns", "one", [b.request(selectors=["device.attributes['gpu.nvidia.com'].type == 'gpu'"])])
    p = b.pod("ns", "trainer", T, claims=[("gpu", {"template": "one"})])
    c = b.template_claim(tpl, p, allocated=[("gpu", "w0", "gpu-1")], reserved_for=[p])
    meta = c["metadata"]
    assert meta["name"] == p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert meta["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["annotations"] == {b.POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert meta["generateName"] == "trainer-gpu-"
    assert meta["finalizers"] == [b.DELETE_PROTECTION]
    assert c["spec"] == tpl["spec"]["spec"]
    alloc = c["status"]["allocation"]
    assert alloc["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "w0", "device": "gpu-1"}
    ]
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["w0"]
    assert c["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": p["metadata"]["uid"]}]


def test_unallocated_claim_has_empty_status_and_no_finalizer() -> None:
    c = b.claim("ns", "c", [b.request()], T)
    assert c["status"] == {}
    assert "finalizers" not in c["metadata"]


def test_direct_claims_get_no_claim_status_on_the_pod() -> None:
    p = b.pod("ns", "p", T, claims=[("gpu", {"claim": "shared"})])
    assert p["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "shared"}]
    assert "resourceClaimStatuses" not in p["status"]


def test_requests_and_prioritized_lists() -> None:
    r = b.request("gpus", count=2, selectors=["x"], admin_access=True)
    assert r == {
        "name": "gpus",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "allocationMode": "ExactCount",
            "count": 2,
            "selectors": [{"cel": {"expression": "x"}}],
            "adminAccess": True,
        },
    }
    assert "count" not in b.request(allocation_mode="All")["exactly"]
    fa = b.first_available_request("gpu", [b.subrequest("big", count=2), b.request("small")])
    assert [s["name"] for s in fa["firstAvailable"]] == ["big", "small"]
    assert fa["firstAvailable"][1]["deviceClassName"] == "gpu.nvidia.com"


def test_device_and_slice_shapes() -> None:
    devs = b.gpu_devices("w0", 2, b.H100_80GB)
    assert devs[0]["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert devs[0]["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert devs[0]["capacity"] == {"memory": {"value": "80Gi"}}
    assert devs[0]["attributes"]["uuid"]["string"].startswith("GPU-")
    # Same device name on another node is another GPU.
    assert b.gpu_devices("w1", 1)[0]["attributes"]["uuid"] != b.gpu_devices("w0", 1)[0]["attributes"]["uuid"]
    s = b.resource_slice("w0", devs, generation=3, slice_count=2)
    assert s["spec"]["pool"] == {"name": "w0", "generation": 3, "resourceSliceCount": 2}
    assert s["spec"]["nodeName"] == "w0"
    assert s["metadata"]["ownerReferences"][0]["uid"] == b.node("w0", T)["metadata"]["uid"]
    shared = b.resource_slice(None, devs, pool="fabric", all_nodes=True)
    assert shared["spec"]["allNodes"] is True and "nodeName" not in shared["spec"]
    tainted = b.gpu_device("gpu-0", taints=[b.taint("gpu.nvidia.com/xid", "NoSchedule", "79")])
    assert tainted["taints"] == [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]


def test_nodes_namespaces_events() -> None:
    n = b.node("w0", T, extended_gpus=8, heartbeat=T + timedelta(hours=1))
    assert n["status"]["capacity"]["nvidia.com/gpu"] == "8"
    ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"][0]
    assert ready["status"] == "True" and ready["lastHeartbeatTime"] == "2026-11-20T13:00:00Z"
    down = b.node("w0", T, ready=False)
    assert [c["status"] for c in down["status"]["conditions"] if c["type"] == "Ready"] == ["Unknown"]
    ns = b.namespace("ops", {b.ADMIN_ACCESS_LABEL: "true"})
    assert ns["metadata"]["labels"][b.ADMIN_ACCESS_LABEL] == "true"
    p = b.pod("ns", "p", T, node_name="w0")
    e = b.event(p, "FailedPrepareDynamicResources", "boom", T, T + timedelta(minutes=3), count=4)
    assert e["involvedObject"]["uid"] == p["metadata"]["uid"]
    assert e["source"] == {"component": "kubelet", "host": "w0"}
    assert (e["count"], e["firstTimestamp"], e["lastTimestamp"]) == (4, "2026-11-20T12:00:00Z", "2026-11-20T12:03:00Z")
    assert e["metadata"]["name"].startswith("p.")


def test_timestamps_must_be_aware() -> None:
    with pytest.raises(ValueError):
        b.ts(datetime(2026, 1, 1))


def test_as_list_and_dump_json() -> None:
    objs = [b.namespace("a"), b.device_class()]
    lst = orjson.loads(b.dump_json(objs))
    assert lst["kind"] == "List" and lst["apiVersion"] == "v1" and lst["items"] == objs


# --- the demo story -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stages() -> list[list[dict[str, Any]]]:
    return demo_stages(DEMO_BASE)


def test_demo_stage_times() -> None:
    times = stage_times(DEMO_BASE)
    assert 4 <= len(times) == STAGE_COUNT <= 6
    assert times[-1] == DEMO_BASE
    assert times == sorted(times) and len(set(times)) == len(times)


def test_demo_is_deterministic(stages: list[list[dict[str, Any]]]) -> None:
    assert demo_stages(DEMO_BASE) == stages
    shifted = demo_stages(DEMO_BASE + timedelta(days=1))
    assert [len(s) for s in shifted] == [len(s) for s in stages]


def test_demo_objects_are_well_formed(stages: list[list[dict[str, Any]]]) -> None:
    for at, objects in zip(stage_times(DEMO_BASE), stages, strict=True):
        uids = Counter(o["metadata"]["uid"] for o in objects)
        assert not [u for u, n in uids.items() if n > 1]
        for o in objects:
            meta = o["metadata"]
            assert o["apiVersion"] and o["kind"] and meta["name"] and meta["uid"], o
            assert RFC3339.match(meta["creationTimestamp"]), o
            assert bool(meta.get("namespace")) == (o["kind"] in NAMESPACED), o
            # Nothing in a snapshot can come from after the snapshot.
            assert all(_parse(s) <= at for s in _timestamps(o)), (at, o)
        assert {o["kind"] for o in objects} >= {
            "DeviceClass",
            "ResourceSlice",
            "ResourceClaimTemplate",
            "ResourceClaim",
            "Namespace",
            "Node",
            "Pod",
            "Event",
        }


def test_demo_references_resolve(stages: list[list[dict[str, Any]]]) -> None:
    for objects in stages:
        pods = _by_kind(objects, "Pod")
        claims = _by_kind(objects, "ResourceClaim")
        templates = _by_kind(objects, "ResourceClaimTemplate")
        classes = _by_kind(objects, "DeviceClass")
        devices = {
            (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
            for s in objects
            if s["kind"] == "ResourceSlice"
            for d in s["spec"].get("devices", ())  # a slice listing counter sets lists no devices
        }
        pod_uids = {p["metadata"]["uid"] for p in pods.values()}
        groups = _by_kind(objects, "PodGroup")
        group_uids = {g["metadata"]["uid"] for g in groups.values()}
        for key, p in pods.items():
            ns = p["metadata"]["namespace"]
            generated = {s["name"]: s["resourceClaimName"] for s in p["status"].get("resourceClaimStatuses", [])}
            for entry in p["spec"].get("resourceClaims", []):
                if "resourceClaimTemplateName" in entry:
                    assert f"{ns}/{entry['resourceClaimTemplateName']}" in templates, key
                    name = generated[entry["name"]]
                else:
                    name = entry["resourceClaimName"]
                if f"{ns}/{name}" in DEMO_INTENTIONALLY_MISSING:
                    continue
                c = claims[f"{ns}/{name}"]
                if "allocation" in c["status"]:
                    reserved = c["status"].get("reservedFor", [])
                    group = (p["spec"].get("schedulingGroup") or {}).get("podGroupName")
                    # A PodGroup's shared claim is reserved for the group, which its members name.
                    assert p["metadata"]["uid"] in [r["uid"] for r in reserved] or any(
                        r.get("resource") == "podgroups" and r["name"] == group for r in reserved
                    ), key
            if "schedulingGroup" in p["spec"]:
                assert f"{ns}/{p['spec']['schedulingGroup']['podGroupName']}" in groups, key
        held: Counter[tuple[str, str, str]] = Counter()
        for key, c in claims.items():
            for r in c["spec"]["devices"]["requests"]:
                for sub in [r["exactly"]] if "exactly" in r else r["firstAvailable"]:
                    assert sub["deviceClassName"] in classes, key
            for res in c["status"].get("allocation", {}).get("devices", {}).get("results", []):
                dev = (res["driver"], res["pool"], res["device"])
                assert dev in devices, key
                held[dev] += 1
            owners = c["metadata"].get("ownerReferences", [])
            if owners:
                assert owners[0]["uid"] in pod_uids | group_uids, key
            for consumer in c["status"].get("reservedFor", []):
                # The retained claim is the one whose consumer is allowed to be gone.
                assert consumer["uid"] in pod_uids | group_uids or key in DEMO_EXPECTATIONS["leaks"], key
        assert not [d for d, n in held.items() if n > 1]


def test_demo_expectations_match_the_story(stages: list[list[dict[str, Any]]]) -> None:
    last = stages[-1]
    pods, claims = _by_kind(last, "Pod"), _by_kind(last, "ResourceClaim")
    assert set(DEMO_EXPECTATIONS["pods"]) <= set(pods)
    boundaries = {boundary for boundary, _ in DEMO_EXPECTATIONS["pods"].values()}
    assert boundaries == {None, "inventory", "allocation", "preparation", "runtime"}
    for key, count in DEMO_EXPECTATIONS["incarnations"].items():
        uids = {o["metadata"]["uid"] for objs in stages for o in objs if o["kind"] == "Pod" and _key(o) == key}
        assert len(uids) == count, key
    for key in DEMO_EXPECTATIONS["not_leaked"]:
        assert key in claims, key
    for key, reason in DEMO_EXPECTATIONS["leaks"].items():
        assert reason == "orphaned-allocation"
        c = claims[key]
        consumers = {r["uid"] for r in c["status"]["reservedFor"]}
        assert consumers and not consumers & {p["metadata"]["uid"] for p in pods.values()}
        held = DEMO_BASE - _parse(c["status"]["allocation"]["allocationTimestamp"])
        devices = len(c["status"]["allocation"]["devices"]["results"])
        assert devices * held / timedelta(hours=1) == pytest.approx(DEMO_EXPECTATIONS["leak_device_hours"][key])
    namespaces = _by_kind(last, "Namespace")
    rules = _by_kind(last, "DeviceTaintRule")
    for kind, subject in DEMO_EXPECTATIONS["warnings"]:
        assert kind in ("admin-access-namespace", "device-taint-rule")
        if kind == "admin-access-namespace":
            assert namespaces[subject]["metadata"]["labels"][b.ADMIN_ACCESS_LABEL] == "true"
        else:
            assert any(r["spec"]["deviceSelector"]["pool"] == subject for r in rules.values())
    for i, expected in DEMO_EXPECTATIONS["stages"].items():
        assert set(expected) <= set(_by_kind(stages[i], "Pod"))


def test_demo_evidence_is_there(stages: list[list[dict[str, Any]]]) -> None:
    """Each failure carries the evidence DESIGN.md's table names."""

    def events(objs: list[dict[str, Any]], pod_key: str, reason: str) -> list[dict[str, Any]]:
        return [
            o
            for o in objs
            if o["kind"] == "Event"
            and o["reason"] == reason
            and f"{o['involvedObject']['namespace']}/{o['involvedObject']['name']}" == pod_key
        ]

    last = stages[-1]
    pods = _by_kind(last, "Pod")
    by_reason = {reason: key for key, (_, reason) in DEMO_EXPECTATIONS["pods"].items()}

    for reason in ("selector-unsatisfiable", "devices-in-use"):
        p = pods[by_reason[reason]]
        cond = p["status"]["conditions"][0]
        assert (cond["type"], cond["status"]) == ("PodScheduled", "False")
        assert "cannot allocate all claims" in cond["message"]
        assert events(last, by_reason[reason], "FailedScheduling")

    prep = by_reason["preparation-failed"]
    counts = [e["count"] for objs in stages for e in events(objs, prep, "FailedPrepareDynamicResources")]
    assert len(counts) == len(stages) and counts == sorted(counts) and counts[0] < counts[-1]
    assert "NodePrepareResources" in events(last, prep, "FailedPrepareDynamicResources")[0]["message"]

    waiting = pods[by_reason["runtime-injection-failed"]]["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerError"
    assert "unresolvable CDI devices k8s.gpu.nvidia.com/claim=" in waiting["message"]

    healthy = pods["inference/llama-serve-0"]["status"]
    assert {c["type"]: c["status"] for c in healthy["conditions"]}["PodReadyToStartContainers"] == "True"
    assert "running" in healthy["containerStatuses"][0]["state"]

    # Devices in use: every H100 matches, some are held by other claims.
    h100_held = {
        r["device"]
        for o in last
        if o["kind"] == "ResourceClaim"
        for r in o["status"].get("allocation", {}).get("devices", {}).get("results", [])
        if r["pool"] == "worker-h100-0"
    }
    assert 0 < len(h100_held) < 8

    # 1.37: the gang short of members, the PodGroup-shared claim, the taint eviction, the unhealthy GPU.
    gang = _by_kind(last, "PodGroup")["ml-training/allreduce"]
    members = [p for p in pods.values() if p["spec"].get("schedulingGroup") == {"podGroupName": "allreduce"}]
    assert 0 < len(members) < gang["spec"]["schedulingPolicy"]["gang"]["minCount"]
    shared = _by_kind(last, "ResourceClaim")["research/" + gangs.ddp_claim_name()]
    assert [(r["resource"], r["name"]) for r in shared["status"]["reservedFor"]] == [("podgroups", "ddp-ranks")]
    evicted = pods[by_reason["device-taint-eviction"]]
    assert {c["type"]: c.get("reason") for c in evicted["status"]["conditions"]}["DisruptionTarget"] == (
        "DeletionByDeviceTaintManager"
    )
    (rule,) = _by_kind(last, "DeviceTaintRule").values()
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    assert rule["spec"]["deviceSelector"]["device"] == gangs.RERANKER_DEVICE
    sick = pods[by_reason["device-unhealthy"]]["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    assert sick[0]["resources"][0]["health"] == "Unhealthy" and sick[0]["resources"][0]["message"]


def test_demo_unchanged_objects_stay_identical(stages: list[list[dict[str, Any]]]) -> None:
    first = {(o["kind"], o["metadata"]["uid"]): o for o in stages[0]}
    last = {(o["kind"], o["metadata"]["uid"]): o for o in stages[-1]}
    for kind in ("DeviceClass", "ResourceSlice", "Namespace", "ResourceClaimTemplate"):
        for key, obj in first.items():
            if key[0] == kind:
                assert last.get(key) == obj
    llama = [k for k, o in first.items() if o["kind"] == "Pod" and o["metadata"]["name"] == "llama-serve-0"]
    assert llama and first[llama[0]] == last[llama[0]]


# --- synthetic -----------------------------------------------------------------------------------


def _content(objects: list[dict[str, Any]]) -> dict[tuple[str, str], bytes]:
    out = {}
    for o in objects:
        meta = {k: v for k, v in o["metadata"].items() if k != "resourceVersion"}
        body = {**o, "metadata": meta}
        if o["kind"] == "Node":
            conditions = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in o["status"]["conditions"]]
            body["status"] = {**o["status"], "conditions": conditions}
        out[(o["kind"], o["metadata"]["uid"])] = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return out


def test_synthetic_counts() -> None:
    nodes = 40
    objs = synthetic_cluster(nodes, 8, T)
    kinds = Counter(o["kind"] for o in objs)
    assert kinds["Node"] == nodes and kinds["ResourceSlice"] == nodes and kinds["DeviceClass"] == 1
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]
    assert sum(len(s["spec"]["devices"]) for s in slices) == nodes * 8
    assert 28 * nodes <= kinds["Pod"] <= 32 * nodes
    assert kinds["Event"] >= 2 * sum(1 for o in objs if o["kind"] == "Pod" and o["spec"].get("resourceClaims"))
    assert len({(o["kind"], o["metadata"]["uid"]) for o in objs}) == len(objs)
    assert len({(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}) == len(objs)

    held = [
        (r["pool"], r["device"])
        for o in objs
        if o["kind"] == "ResourceClaim"
        for r in o["status"].get("allocation", {}).get("devices", {}).get("results", [])
    ]
    assert len(held) == len(set(held))
    assert 0.6 <= len(held) / (nodes * 8) <= 0.8
    claims = {_key(o) for o in objs if o["kind"] == "ResourceClaim"}
    templates = {_key(o) for o in objs if o["kind"] == "ResourceClaimTemplate"}
    for p in (o for o in objs if o["kind"] == "Pod"):
        ns = p["metadata"]["namespace"]
        statuses = {s["name"]: s["resourceClaimName"] for s in p["status"].get("resourceClaimStatuses", [])}
        for entry in p["spec"].get("resourceClaims", []):
            if "resourceClaimTemplateName" in entry:
                assert f"{ns}/{entry['resourceClaimTemplateName']}" in templates
                assert f"{ns}/{statuses[entry['name']]}" in claims
            else:
                assert f"{ns}/{entry['resourceClaimName']}" in claims
    assert any(p["status"]["phase"] == "Pending" for p in objs if p["kind"] == "Pod")
    assert any(o["kind"] == "ResourceClaim" and "ownerReferences" not in o["metadata"] for o in objs)
    assert all(_parse(s) <= T for o in objs for s in _timestamps(o))


def test_synthetic_is_deterministic_and_bytes_match() -> None:
    objs = synthetic_cluster(5, at=T, seed=3)
    assert synthetic_cluster(5, at=T, seed=3) == objs
    assert synthetic_cluster(5, at=T, seed=4) != objs
    lst = orjson.loads(synthetic_list_bytes(5, at=T, seed=3))
    assert lst["kind"] == "List" and lst["items"] == orjson.loads(orjson.dumps(objs))


@pytest.mark.parametrize("churn", [0.05, 0.2])
def test_synthetic_churn_changes_about_that_fraction(churn: float) -> None:
    nodes = 60
    gens = [
        _content(synthetic_cluster(nodes, at=generation_time(T, g), churn=churn, generation=g, seed=1))
        for g in range(3)
    ]
    for before, after in zip(gens, gens[1:], strict=False):
        changed = sum(1 for k, v in before.items() if after.get(k) != v)
        fraction = changed / len(before)
        assert churn * 0.6 <= fraction <= churn * 1.3, fraction
        assert 0.8 <= len(after) / len(before) <= 1.2
    # A generation without churn changes nothing but node heartbeats.
    still = _content(synthetic_cluster(nodes, at=generation_time(T, 1), churn=0.0, generation=1, seed=1))
    assert still == gens[0]
