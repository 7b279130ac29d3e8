"""The demo story on a real control plane (``scripts/demo --kube``).

``apply_story`` creates the story's last stage through a real kube-apiserver as its owners would have: Namespaces,
Nodes (their status as a kubelet reports it), DeviceClasses, ResourceSlices, DeviceTaintRules, templates, claims,
Pods and Events, each status through its ``/status`` subresource. The API server gives every object a new UID, so
references are rewritten as they are created: owner references (kept only to objects created here: a Job or
StatefulSet owner that does not exist would have the garbage collector delete the Pod), a claim's
``reservedFor``, an Event's ``involvedObject``. An object the story shows being deleted is deleted after it is
made (a finalizer or a grace period with no kubelet keeps it terminating, as in the story).

Then the real components act on it: the scheduler places the Pods the story leaves pending if it can (or
reports why not), the resourceclaim controller releases claims whose consumers are gone, the device-taint
eviction controller evicts the holders of NoExecute-tainted devices. So what Claimline shows of it is what a
cluster would do with the story, not the story's own verdicts. Kinds the control plane does not serve (the
gang-scheduling API without its feature gates) are reported and skipped.

    python -m demo.kube --dir DIR     start the control plane (demo.control_plane), apply the story, write
                                      DIR/kubeconfig and DIR/ready, and keep running until SIGTERM/SIGINT
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import signal
import sys
import threading
import urllib.error
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from demo.control_plane import Api, ControlPlane, ControlPlaneError

# The order objects are made in: what others refer to first.
_ORDER = (
    "Namespace", "Node", "DeviceClass", "ResourceSlice", "DeviceTaintRule", "Workload", "PodGroup",
    "ResourceClaimTemplate",
)
# Kinds a control plane serves only with their feature gates on (gang scheduling).
_OPTIONAL = ("Workload", "PodGroup")
# Owners created here, whose references are kept (rewritten to the new UID).
_OWNERS = {"Node", "Pod", "PodGroup", "Workload"}
# Held back from the scheduler while the story is applied: a pending Pod is placed only once its claims stand
# as the story has them (the gate is lifted at the end, leaving the story's own gates).
GATE = "demo.claimline.io/applying"
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
                  "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")


@dataclass
class Applied:
    """What ``apply_story`` did: objects made (kind → names), problems (the API server's refusals), kinds the
    control plane does not serve, and the new UID of each story UID."""

    created: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    not_served: set[str] = field(default_factory=set)
    uids: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        made = ", ".join(f"{len(names)} {kind}" for kind, names in self.created.items())
        out = f"created {made}"
        if self.not_served:
            out += f"; not served by this control plane: {', '.join(sorted(self.not_served))}"
        if self.problems:
            out += f"; {len(self.problems)} refused"
        return out


def _path(obj: dict[str, Any], plural: str, name: str | None = None) -> str:
    group_version = obj["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}" + (f"/{name}" if name else "")


def _plural(kind: str) -> str:
    lower = kind.lower()
    return lower + ("es" if lower.endswith("s") else "s")


def _label(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']} {where}{meta['name']}"


def _refusal(exc: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(exc.read() or b"{}").get("message") or exc.reason
    except ValueError:
        message = exc.reason
    return f"{exc.code} {message}"


class _Applier:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.done = Applied()

    def _remap(self, uid: str | None) -> str | None:
        return self.done.uids.get(uid, uid) if uid else uid

    def _body(self, obj: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        body.pop("status", None)
        meta = body["metadata"]
        for key in _SERVER_FIELDS:
            meta.pop(key, None)
        owners = [
            {**ref, "uid": self.done.uids[ref["uid"]]}
            for ref in meta.pop("ownerReferences", [])
            if ref.get("kind") in _OWNERS and ref.get("uid") in self.done.uids
        ]
        if owners:
            meta["ownerReferences"] = owners
        return body

    def create(self, obj: dict[str, Any], gated: bool = False) -> dict[str, Any] | None:
        """Make ``obj`` (without its status); the API server's answer, or None (refused or not served)."""
        if obj["kind"] in self.done.not_served:
            return None
        plural = _plural(obj["kind"])
        body = self._body(obj)
        if gated:
            body["spec"]["schedulingGates"] = [*(body["spec"].get("schedulingGates") or []), {"name": GATE}]
        try:
            made: dict[str, Any] = self.api.create(_path(obj, plural), body)
        except urllib.error.HTTPError as exc:
            # 404 on a create: the kind is not served (a missing namespace would be a 404 too, but the story's
            # are made first; an optional kind is the likely one).
            if exc.code == 404 and (not obj["metadata"].get("namespace") or obj["kind"] in _OPTIONAL):
                self.done.not_served.add(obj["kind"])
                return None
            if exc.code == 409 and obj["kind"] == "Namespace":  # default, kube-system: there already
                made = self.api.get(_path(obj, plural, obj["metadata"]["name"]))
            else:
                self.done.problems.append(f"{_label(obj)}: {_refusal(exc)}")
                return None
        if "uid" in obj["metadata"]:
            self.done.uids[obj["metadata"]["uid"]] = made["metadata"]["uid"]
        self.done.created.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
        return made

    def patch(self, obj: dict[str, Any], patch: dict[str, Any], subresource: str = "") -> None:
        path = _path(obj, _plural(obj["kind"]), obj["metadata"]["name"]) + subresource
        try:
            self.api.merge_patch(path, patch)
        except urllib.error.HTTPError as exc:
            self.done.problems.append(f"{_label(obj)}{subresource.replace('/', ' ')}: {_refusal(exc)}")

    def set_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        self.patch(obj, {"status": status}, "/status")

    def drop_duplicates(self, pod: dict[str, Any], keep: set[str]) -> None:
        """Delete claims the resourceclaim controller made for ``pod`` before the story's own were there (the
        Pod's status now names the story's)."""
        uid = self.done.uids.get(pod["metadata"]["uid"])
        namespace = pod["metadata"]["namespace"]
        listed = self.api.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")["items"]
        for claim in listed:
            meta = claim["metadata"]
            if meta["name"] not in keep and any(r.get("uid") == uid for r in meta.get("ownerReferences") or []):
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api.delete(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{meta['name']}")

    def claim_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        status = copy.deepcopy(claim.get("status") or {})
        for ref in status.get("reservedFor") or []:
            ref["uid"] = self._remap(ref.get("uid"))
        return status

    def delete(self, obj: dict[str, Any]) -> None:
        path = _path(obj, _plural(obj["kind"]), obj["metadata"]["name"])
        grace = obj["metadata"].get("deletionGracePeriodSeconds")
        try:
            self.api.delete(path, grace_period=grace)
        except urllib.error.HTTPError as exc:
            self.done.problems.append(f"{_label(obj)} delete: {_refusal(exc)}")


def apply_story(api: Api, objects: Iterable[dict[str, Any]]) -> Applied:
    """Create ``objects`` (one stage of the demo story) through ``api``; what was made and refused."""
    objects = list(objects)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    owned_by_pod: dict[str, list[dict[str, Any]]] = {}
    for claim in by_kind.get("ResourceClaim", []):
        for ref in claim["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Pod":
                owned_by_pod.setdefault(ref["uid"], []).append(claim)
    applier = _Applier(api)
    with_status: list[dict[str, Any]] = []
    for kind in _ORDER:
        for obj in by_kind.get(kind, []):
            if applier.create(obj) is not None and obj.get("status") and kind != "Namespace":
                with_status.append(obj)
    for obj in with_status:
        applier.set_status(obj, obj["status"])
    # Claims no Pod owns (shared, or a PodGroup's), then each Pod followed at once by the claims made for it
    # from its templates: the resourceclaim controller finds those (owned by the Pod, annotated with the Pod's
    # claim name) and makes no other.
    pod_claims = {id(c) for claims in owned_by_pod.values() for c in claims}
    claims = [c for c in by_kind.get("ResourceClaim", []) if id(c) not in pod_claims]
    for claim in claims:
        applier.create(claim)
    pods = []
    for pod in by_kind.get("Pod", []):
        if applier.create(pod, gated=not pod["spec"].get("nodeName")) is None:
            continue
        pods.append(pod)
        for claim in owned_by_pod.get(pod["metadata"]["uid"], []):
            if applier.create(claim) is not None:
                claims.append(claim)
    # Statuses once every UID is known: claims (allocation, reservedFor), then Pods (kubelet's view).
    for claim in claims:
        if claim.get("status"):
            applier.set_status(claim, applier.claim_status(claim))
    story_claims = {c["metadata"]["name"] for c in by_kind.get("ResourceClaim", [])}
    for pod in pods:
        if pod.get("status"):
            applier.set_status(pod, pod["status"])
        applier.drop_duplicates(pod, story_claims)
        if not pod["spec"].get("nodeName"):
            applier.patch(pod, {"spec": {"schedulingGates": pod["spec"].get("schedulingGates")}})
    for event in by_kind.get("Event", []):
        event = copy.deepcopy(event)
        involved = event.get("involvedObject") or {}
        involved["uid"] = applier._remap(involved.get("uid"))
        applier.create(event)
    for obj in objects:
        if obj["metadata"].get("deletionTimestamp") and obj["metadata"]["name"] in applier.done.created.get(
            obj["kind"], []
        ):
            applier.delete(obj)
    return applier.done


def story_objects(now: datetime) -> list[dict[str, Any]]:
    """The demo story's last stage as of ``now``."""
    from demo.story import demo_stages

    return demo_stages(now)[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.kube", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, type=Path, help="the control plane's folder (made afresh)")
    args = parser.parse_args(argv)
    workdir: Path = args.dir
    (workdir / "ready").unlink(missing_ok=True)
    try:
        plane = ControlPlane(workdir)
    except ControlPlaneError as exc:
        print(f"demo --kube: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(f"demo --kube: starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager from {plane.bindir}",
          flush=True)
    try:
        plane.start()
        print(f"demo --kube: control plane ready in {max(plane.startup.values()):.1f} s; kube-apiserver "
              f"{plane.server}, logs in {workdir}/*.log", flush=True)
        applied = apply_story(plane.api, story_objects(datetime.now(UTC)))
        print(f"demo --kube: the demo story applied: {applied.summary()}", flush=True)
        for problem in applied.problems:
            print(f"demo --kube:   refused: {problem}", flush=True)
        (workdir / "ready").write_text(str(plane.kubeconfig))
        done.wait()
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
