"""``scripts/demo --kube``'s setup: the demo story applied to a real control plane (kube-apiserver, scheduler,
controller-manager: the session's, shared with tests/test_control_plane_e2e.py), then collected by Claimline
through its kubeconfig as any cluster is."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from claimline.pipeline import collect_and_derive
from collector.models import ObjectVersion, Snapshot
from collector.sources import ClusterSource
from demo.control_plane import ControlPlane, binaries_dir, kubectl_path
from demo.kube import _pod_status, apply_story, story_objects

pytestmark = [
    pytest.mark.skipif(binaries_dir() is None, reason="control plane not built (scripts/build-control-plane)"),
    pytest.mark.control_plane,
    pytest.mark.django_db,
]


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
    # without it refuses Workloads and PodGroups, and then the PodGroup's claim cannot be given its allocation. The
    # API server refuses nothing else of the story.
    assert applied.not_served <= {"Workload", "PodGroup"}
    assert all("ddp-ranks-gpus" in problem for problem in applied.problems), applied.problems

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


def test_kubelet_device_health_is_named_as_the_api_server_validates_it() -> None:
    pod = {
        "spec": {"containers": [
            {"name": "main", "resources": {"claims": [{"name": "gpu"}, {"name": "pair", "request": "left"}]}}]},
        "status": {"containerStatuses": [{"name": "main", "allocatedResourcesStatus": [
            {"name": "claim:gpu/gpu", "resources": []}, {"name": "claim:pair/left", "resources": []}]}]},
    }
    names = [h["name"] for h in _pod_status(pod)["containerStatuses"][0]["allocatedResourcesStatus"]]
    assert names == ["claim:gpu", "claim:pair/left"]
    assert pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["name"] == "claim:gpu/gpu"
