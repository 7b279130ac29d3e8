"""``scripts/demo --kube``'s setup: the demo story applied to a real control plane (kube-apiserver, scheduler,
controller-manager: the session's, shared with tests/test_control_plane_e2e.py), then collected by Claimline
through its kubeconfig as any cluster is; and the story's statuses are ones the API server accepts (checked here
without a control plane, as kube-apiserver's validation reads them)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from claimline.pipeline import collect_and_derive
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo.control_plane import ControlPlane, binaries_dir, kubectl_path
from demo.kube import apply_story, story_objects
from demo.story import demo_stages


@pytest.mark.skipif(binaries_dir() is None, reason="control plane not built (scripts/build-control-plane)")
@pytest.mark.control_plane
@pytest.mark.django_db
def test_the_story_applied_to_a_real_control_plane_is_what_claimline_collects(
    control_plane: ControlPlane,
) -> None:
    story = story_objects(datetime.now(UTC))
    applied = apply_story(control_plane.api, story)
    print(applied.summary())
    by_kind: dict[str, set[tuple[str, str]]] = {}
    for obj in story:
        by_kind.setdefault(obj["kind"], set()).add((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
    for kind in ("Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod", "Event"):
        assert sorted(applied.created.get(kind, [])) == sorted(name for _, name in by_kind[kind]), kind
    # The session's control plane serves the gang-scheduling API (GenericWorkload, DRAWorkloadResourceClaims); one
    # without it refuses Workloads and PodGroups (named as not served). The API server refuses nothing of the story.
    assert applied.not_served <= {"Workload", "PodGroup"}
    assert not applied.problems, applied.problems

    source = ClusterSource("kube", "kubeconfig", str(control_plane.kubeconfig))
    snapshot = collect_and_derive(source, datetime.now(UTC), lambda: datetime.now(UTC))
    assert snapshot.status == Snapshot.Status.OK, snapshot.error

    namespaces = {ns for ns, _ in by_kind["ResourceClaim"]}
    served: dict[tuple[str, str], str] = {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c["metadata"]["uid"]
        for c in control_plane.api.get("/apis/resource.k8s.io/v1/resourceclaims")["items"]
        if c["metadata"]["namespace"] in namespaces
    }
    collected = {
        (ns, name): uid
        for ns, name, uid in ObjectVersion.objects.filter(
            cluster=snapshot.cluster, kind="ResourceClaim", valid_to__isnull=True, deleted=False,
            namespace__in=namespaces,
        ).values_list("namespace", "name", "uid")
    }
    # Claimline holds exactly the claims the API server serves (with the UIDs it gave them), and those are the
    # story's: the resourceclaim controller made none of its own for the Pods. Where PodGroups are served it makes
    # one for the story's PodGroup from its template (under a name of its own), owned by the group.
    assert collected == served
    assert by_kind["ResourceClaim"] <= set(collected)
    for ns, name in set(collected) - by_kind["ResourceClaim"]:
        owners = control_plane.api.get(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")[
            "metadata"].get("ownerReferences") or []
        assert [o["kind"] for o in owners] == ["PodGroup"], (ns, name, owners)

    # A Pod the story has running: its claim's allocation, set through the status subresource, is shown.
    out = StringIO()
    call_command("explain", "inference/llama-serve-0", "--json", "--cluster", "kube", stdout=out)
    doc: dict[str, Any] = json.loads(out.getvalue())
    claim = next(c for c in doc["claims"] if c["name"] == "llama-serve-0-gpu-0b5e9")
    allocation = claim["boundaries"]["allocation"]
    assert allocation["state"] == "ok", allocation
    devices = sorted(e["device"] for e in allocation["evidence"] if e.get("kind") == "AllocationResult")
    assert devices == ["gpu-0", "gpu-1"], allocation["evidence"]

    # kubectl with the kubeconfig scripts/demo --kube prints.
    kubectl = kubectl_path()
    if kubectl is not None:
        out = subprocess.run([str(kubectl), "--kubeconfig", str(control_plane.kubeconfig), "get", "resourceclaims",
                              "-n", "inference", "-o", "name"], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        assert "resourceclaim.resource.k8s.io/llama-serve-0-gpu-0b5e9" in out.stdout.split()


def _stages() -> list[list[dict[str, Any]]]:
    return demo_stages(datetime(2026, 11, 30, 12, tzinfo=UTC))


def _health_names_allowed(pod: dict[str, Any], container: dict[str, Any]) -> set[str]:
    """The ``allocatedResourcesStatus[].name`` values kube-apiserver accepts for ``container`` (its
    validateContainerStatusAllocatedResourcesStatus): ``claim:<claim>`` for a ``resources.claims[]`` entry naming no
    request, ``claim:<claim>/<request>`` for one that does, ``claim:<claim>/<request>`` of the extended-resource
    claim's request mappings for this container, and the container's resource requests by name."""
    resources = container.get("resources") or {}
    allowed = {
        f"claim:{c['name']}/{c['request']}" if c.get("request") else f"claim:{c['name']}"
        for c in resources.get("claims") or []
    }
    extended = pod.get("status", {}).get("extendedResourceClaimStatus") or {}
    allowed |= {
        f"claim:{extended['resourceClaimName']}/{m['requestName']}"
        for m in extended.get("requestMappings") or []
        if m.get("containerName") == container["name"] and (resources.get("requests") or {}).get(m["resourceName"])
    }
    return allowed | set(resources.get("requests") or {})


def _request_names(claim: dict[str, Any]) -> set[str]:
    """The names a claim's allocation may refer to (kube-apiserver's gatherRequestNames and requestNames.Has):
    each request, and ``<request>/<subrequest>`` for each of a ``firstAvailable`` request's subrequests."""
    names: set[str] = set()
    for request in claim["spec"]["devices"].get("requests") or []:
        names.add(request["name"])
        names |= {f"{request['name']}/{sub['name']}" for sub in request.get("firstAvailable") or []}
    return names


def _story(kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, stage in enumerate(_stages()):
        for obj in stage:
            if obj["kind"] == kind:
                yield i, obj


def test_kubelet_device_health_is_named_as_the_api_server_validates_it() -> None:
    checked, wrong = 0, []
    for i, pod in _story("Pod"):
        containers = {c["name"]: c for c in pod["spec"].get("containers") or []}
        for status in pod.get("status", {}).get("containerStatuses") or []:
            allowed = _health_names_allowed(pod, containers[status["name"]])
            for health in status.get("allocatedResourcesStatus") or []:
                checked += 1
                if health["name"] not in allowed:
                    wrong.append(f"stage {i} {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                                 f"{status['name']}: {health['name']} (allowed: {sorted(allowed)})")
    assert checked and not wrong, wrong


def test_allocation_results_name_requests_of_the_claim() -> None:
    checked, wrong = 0, []
    for i, claim in _story("ResourceClaim"):
        devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        named = [r["request"] for r in devices.get("results") or []]
        named += [name for config in devices.get("config") or [] for name in config.get("requests") or []]
        allowed = _request_names(claim)
        checked += len(named)
        wrong += [f"stage {i} {claim['metadata']['namespace']}/{claim['metadata']['name']}: {name} "
                  f"(requests: {sorted(allowed)})" for name in named if name not in allowed]
    assert checked and not wrong, wrong
