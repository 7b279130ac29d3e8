"""A synthetic cluster at Kubernetes scale, for benchmarks.

``nodes`` GPU nodes, one ResourceSlice each, ~70% of GPUs allocated to claims of
running pods (template-generated and direct claims), a few pending GPU pods, and
non-GPU pods up to ``pods_per_node`` per node (5,000 nodes ≈ 150k pods).

Everything is a pure function of the arguments. ``churn`` and ``generation``
model later snapshots: in each generation 1..g, a ``churn`` fraction of the
workload units (a GPU pod with its claim and events, a pending pod, a non-GPU
pod) changes — pods finish and are replaced by new incarnations with new
claims, direct claims are re-reserved, pending pods' event counts grow, plain
pods restart. Unchurned objects are identical across generations, except node
heartbeats (noise the collector ignores).

Objects are built from prototypes made with :mod:`demo.builders` and share
unchanging sub-structures (containers, conditions, selectors) to stay fast and
small: treat them as read-only, or deep-copy before mutating.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from collector.gcpause import gc_paused
from demo import builders as b

Obj = dict[str, Any]

SYNTHETIC_BASE = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
GENERATION_INTERVAL = timedelta(minutes=5)
PODS_PER_NODE = 30
GPU_FRACTION = 0.7
PENDING_FRACTION = 0.1  # pending GPU pods per node
DIRECT_CLAIM_FRACTION = 0.25
H100_FRACTION = 0.25
CLAIM_SIZES = (1, 1, 1, 2, 2, 4)

_M64 = (1 << 64) - 1
# Decision salts, so independent choices about one unit stay uncorrelated.
_S_MODEL, _S_ALLOC, _S_SIZE, _S_DIRECT, _S_NS, _S_PENDING, _S_CHURN, _S_APP, _S_TIME, _S_RESTART = range(10)
_CHUNK = 2048
_PLAIN_APPS = ("web-api", "worker", "redis", "ingest", "batch-etl")


def _mix(*vals: int) -> int:
    """A well-spread 64-bit hash of some ints.

    Python's tuple hash of ints is deterministic (no per-process salt, unlike str),
    and a multiply-xorshift finalizer spreads its bits; far cheaper than hashlib.
    """
    x = (hash(vals) * 0x9E3779B97F4A7C15) & _M64
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    return x ^ (x >> 32)


def _frac(*vals: int) -> float:
    return _mix(*vals) / 18446744073709551616.0


def _uid(*vals: int) -> str:
    # uuid5 per object would cost more than building it; a UUID-shaped hash is unique enough.
    h = f"{_mix(*vals):016x}{_mix(*vals, 0xC0FFEE):016x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


_PAIRS = [x + y for x in _ALPHABET for y in _ALPHABET]


def _suffix(h: int, length: int = 5) -> str:
    """Like the apiserver's generateName suffix (same alphabet), from a hash."""
    out = ""
    while len(out) < length:
        h, r = divmod(h, 729)
        out += _PAIRS[r]
    return out[:length]


def generation_time(start: datetime, generation: int, interval: timedelta = GENERATION_INTERVAL) -> datetime:
    """The ``at`` to pass for ``generation`` so it lines up with generation 0 taken at ``start``."""
    return start + generation * interval


class _Generator:
    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        at: datetime,
        seed: int,
        churn: float,
        generation: int,
        interval: timedelta,
        pods_per_node: int,
    ) -> None:
        if nodes < 0 or gpus_per_node < 0 or generation < 0:
            raise ValueError("nodes, gpus_per_node and generation must not be negative")
        self.nodes, self.gpus, self.seed = nodes, gpus_per_node, seed
        self.churn, self.generation, self.pods_per_node = churn, generation, pods_per_node
        self.at_s = int(at.timestamp())
        self.interval_s = int(interval.total_seconds())
        # Stable objects hang off generation 0's time, so they do not move between generations.
        self.origin_s = self.at_s - generation * self.interval_s
        self.namespaces = [f"team-{i:03d}" for i in range(max(4, min(nodes // 10, 1000)))]
        self._ts: dict[int, str] = {}
        self._ts_s: dict[int, str] = {}
        self._labels: dict[str, Obj] = {}
        self._conditions: dict[tuple[int, int], list[Obj]] = {}
        self._states: dict[int, Obj] = {}
        self._node_selectors: dict[str, Obj] = {}
        self._build_prototypes()

    # --- caches ---------------------------------------------------------------------------------

    def ts(self, s: int) -> str:
        out = self._ts_s.get(s)
        if out is not None:
            return out
        day, rem = divmod(s, 86400)
        prefix = self._ts.get(day)
        if prefix is None:
            prefix = self._ts[day] = datetime.fromtimestamp(day * 86400, UTC).strftime("%Y-%m-%dT")
        out = self._ts_s[s] = f"{prefix}{rem // 3600:02d}:{rem // 60 % 60:02d}:{rem % 60:02d}Z"
        return out

    def running_conditions(self, sched: int, started: int) -> list[Obj]:
        key = (sched, started)
        out = self._conditions.get(key)
        if out is None:
            # Same shape as builders.running_conditions, without its datetime round trips.
            s, r = self.ts(sched), self.ts(started)
            out = self._conditions[key] = [
                {**c, "lastTransitionTime": s if c["type"] in ("Initialized", "PodScheduled") else r}
                for c in self.proto_conditions
            ]
        return out

    def running_state(self, started: int) -> Obj:
        out = self._states.get(started)
        if out is None:
            out = self._states[started] = b.state_running(self.dt(started))
        return out

    def node_selector(self, node_name: str) -> Obj:
        out = self._node_selectors.get(node_name)
        if out is None:
            out = self._node_selectors[node_name] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        return out

    @staticmethod
    def dt(s: int) -> datetime:
        return datetime.fromtimestamp(s, UTC)

    # --- prototypes ----------------------------------------------------------------------------------

    def _build_prototypes(self) -> None:
        t = self.dt(self.origin_s)
        self.templates = {size: [b.request(count=size)] for size in sorted(set(CLAIM_SIZES))}
        self.claim_specs = {size: b.claim_spec(reqs) for size, reqs in self.templates.items()}
        gpu_pod = b.pod(
            "ns",
            "proto",
            t,
            claims=[("gpu", {"template": "gpu-1"})],
            node_name="node",
            phase="Running",
            conditions=[],
            container_state=b.state_running(t),
        )
        self.proto_conditions = b.running_conditions(t, t)
        self.gpu_spec = gpu_pod["spec"]
        self.gpu_container_status = gpu_pod["status"]["containerStatuses"][0]
        self.pending_spec = {k: v for k, v in gpu_pod["spec"].items() if k != "nodeName"}
        plain = b.pod(
            "ns",
            "proto",
            t,
            claims=(),
            node_name="node",
            phase="Running",
            conditions=[],
            container_state=b.state_running(t),
            image="ghcr.io/example/web-api:2.14.1",
            command=("gunicorn", "app:wsgi"),
            cpu="500m",
            memory="1Gi",
        )
        self.plain_spec = plain["spec"]
        self.plain_container_status = plain["status"]["containerStatuses"][0]
        self.gpu_models = {
            "a100": b.gpu_devices("proto", self.gpus, b.A100_40GB),
            "h100": b.gpu_devices("proto", self.gpus, b.H100_80GB),
        }
        self.node_proto = b.node("node", self.dt(self.origin_s - 60 * 86400), heartbeat=t)
        self.node_labels = {
            "a100": {
                **self.node_proto["metadata"]["labels"],
                "node.kubernetes.io/instance-type": "a2-highgpu-8g",
                "nvidia.com/gpu.present": "true",
            },
            "h100": {
                **self.node_proto["metadata"]["labels"],
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "nvidia.com/gpu.present": "true",
            },
        }
        total = max(self.nodes, 1)
        self.unschedulable_message = (
            f"0/{total} nodes are available: {total} cannot allocate all claims. still not schedulable, "
            f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
        )
        self.claim_annotations = {b.POD_CLAIM_NAME_ANNOTATION: "gpu"}
        self.finalizers = [b.DELETE_PROTECTION]
        self.scheduler_source = {"component": "default-scheduler"}

    # --- cluster-wide objects ------------------------------------------------------------------------

    def cluster_objects(self) -> Iterator[Obj]:
        born = self.dt(self.origin_s - 90 * 86400)
        yield b.device_class(created=born, extended_resource_name="nvidia.com/gpu")
        for ns in ("default", "kube-system", "monitoring", "nvidia-dra-driver-gpu", *self.namespaces):
            yield b.namespace(ns, created=born)
        for ns in self.namespaces:
            for size, reqs in self.templates.items():
                yield b.claim_template(ns, f"gpu-{size}", reqs, created=born)

    # --- per node ------------------------------------------------------------------------------------

    def churned(self, unit: int) -> tuple[int, int]:
        """(times churned, last generation it churned in) for a workload unit."""
        times = last = 0
        if self.churn > 0:
            for k in range(1, self.generation + 1):
                if _frac(self.seed, unit, k, _S_CHURN) < self.churn:
                    times, last = times + 1, k
        return times, last

    def unit_start(self, unit: int, times: int, last: int) -> int:
        """When a unit's current incarnation was created: days ago, or just before its churn."""
        if times == 0:
            return self.origin_s - 600 - (_mix(self.seed, unit, _S_TIME) % (6 * 86400)) // 60 * 60
        return self.origin_s + last * self.interval_s - 30 - _mix(self.seed, unit, last, _S_TIME) % 240

    def node_objects(self, n: int) -> list[Obj]:
        seed, gpus = self.seed, self.gpus
        node_name = f"gpu-node-{n:05d}"
        model = "h100" if _frac(seed, n, _S_MODEL) < H100_FRACTION else "a100"
        out: list[Obj] = [self.node(node_name, n, model), self.slice(node_name, n, model)]
        pods = 0
        # Workload unit ids: (node << 12) + slot; claims 0.., the pending pod 1024, plain pods 2048..
        # GPU workloads: claims of 1/2/4 GPUs until ~70% of the node's GPUs are taken.
        target = min(gpus, max(0, round(gpus * GPU_FRACTION + (_mix(seed, n, _S_ALLOC) % 3) - 1)))
        device, j = 0, 0
        while device < target:
            unit = (n << 12) + j
            size = CLAIM_SIZES[_mix(seed, unit, _S_SIZE) % len(CLAIM_SIZES)]
            while size > target - device:
                size //= 2
            out += self.gpu_workload(unit, node_name, list(range(device, device + size)), size)
            device += size
            j += 1
            pods += 1
        if _frac(seed, n, _S_PENDING) < PENDING_FRACTION:
            out += self.pending_workload((n << 12) + 1024)
            pods += 1
        spec, host_ip = {**self.plain_spec, "nodeName": node_name}, b.node_ip(node_name)
        for k in range(max(0, self.pods_per_node - pods)):
            out.append(self.plain_pod((n << 12) + 2048 + k, node_name, k, spec, host_ip))
        return out

    def node(self, name: str, n: int, model: str) -> Obj:
        proto = self.node_proto
        meta = {
            **proto["metadata"],
            "name": name,
            "uid": _uid(self.seed, n, 1),
            "resourceVersion": str(1_000_000 + (self.at_s + n) % 9_000_000),
            "labels": {**self.node_labels[model], "kubernetes.io/hostname": name},
        }
        heartbeat = self.ts(self.at_s - n % 40)
        conditions = [{**c, "lastHeartbeatTime": heartbeat} for c in proto["status"]["conditions"]]
        status = {
            **proto["status"],
            "addresses": [
                {"type": "InternalIP", "address": b.node_ip(name)},
                {"type": "Hostname", "address": name},
            ],
            "conditions": conditions,
            "nodeInfo": {
                **proto["status"]["nodeInfo"],
                "bootID": _uid(self.seed, n, 4),
                "machineID": _uid(self.seed, n, 5).replace("-", ""),
                "systemUUID": _uid(self.seed, n, 6),
            },
        }
        return {
            **proto,
            "metadata": meta,
            "spec": {"providerID": f"gce://synthetic/z/{name}"},
            "status": status,
        }

    def slice(self, node_name: str, n: int, model: str) -> Obj:
        devices = []
        for i, proto in enumerate(self.gpu_models[model]):
            attrs = {**proto["attributes"], "uuid": {"string": "GPU-" + _uid(self.seed, n, i, 2)}}
            devices.append({**proto, "attributes": attrs})
        return {
            "apiVersion": b.DRA_API,
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{node_name}-gpu.nvidia.com-{_suffix(_mix(self.seed, n, 3))}",
                "uid": _uid(self.seed, n, 3),
                "resourceVersion": str(1_000_000 + _mix(self.seed, n, 3) % 9_000_000),
                "creationTimestamp": self.ts(self.origin_s - 60 * 86400 + 720),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node_name,
                        "uid": _uid(self.seed, n, 1),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": b.GPU_DRIVER,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }

    def _meta(self, name: str, uid: str, created: int, ns: str, rv_salt: int, **extra: Any) -> Obj:
        return {
            "name": name,
            "uid": uid,
            "resourceVersion": str(1_000_000 + _mix(rv_salt) % 9_000_000),
            "creationTimestamp": self.ts(created),
            "namespace": ns,
            **extra,
        }

    def gpu_workload(self, unit: int, node_name: str, devices: list[int], size: int) -> list[Obj]:
        seed = self.seed
        times, last = self.churned(unit)
        ns = self.namespaces[_mix(seed, unit, _S_NS) % len(self.namespaces)]
        app = ("trainer", "serve", "notebook", "eval", "embed", "finetune")[_mix(seed, unit, _S_APP) % 6]
        direct = _frac(seed, unit, _S_DIRECT) < DIRECT_CLAIM_FRACTION
        created = self.unit_start(unit, times, last)
        sched, started = created + 2, created + 40
        pod_name = f"{app}-{_suffix(_mix(seed, unit, 7), 6)}-{_suffix(_mix(seed, unit, times, 8))}"
        pod_uid = _uid(seed, unit, times, 10)
        if direct:
            # A user-made claim outlives its pods: same name and UID, re-reserved by each incarnation.
            claim_name = f"{app}-{_suffix(_mix(seed, unit, 7), 6)}-gpu"
            claim_uid = _uid(seed, unit, 11)
            claim_created = self.unit_start(unit, 0, 0) - 60
            source = {"name": "gpu", "resourceClaimName": claim_name}
        else:
            claim_name = b.generated_claim_name(pod_name, "gpu", pod_uid)
            claim_uid = _uid(seed, unit, times, 11)
            claim_created = created
            source = {"name": "gpu", "resourceClaimTemplateName": f"gpu-{size}"}
        rv = _mix(seed, unit, times)
        pod_hash = rv >> 20
        pod_meta = self._meta(pod_name, pod_uid, created, ns, rv, labels={"app": app})
        status: Obj = {
            "phase": "Running",
            "conditions": self.running_conditions(sched, started),
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    **self.gpu_container_status,
                    "containerID": f"containerd://{pod_uid.replace('-', '')}{pod_uid.replace('-', '')}",
                    "state": self.running_state(started),
                }
            ],
            "hostIP": b.node_ip(node_name),
            "podIP": f"10.{64 + pod_hash % 64}.{pod_hash >> 8 & 255}.{pod_hash >> 16 & 255}",
            "startTime": self.ts(created),
        }
        if not direct:
            status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        p = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": pod_meta,
            "spec": {**self.gpu_spec, "resourceClaims": [source], "nodeName": node_name},
            "status": status,
        }
        claim_meta = self._meta(claim_name, claim_uid, claim_created, ns, rv + 1)
        if not direct:
            claim_meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
            claim_meta["annotations"] = self.claim_annotations
            claim_meta["generateName"] = b.generate_name(pod_name, "gpu")
        claim_meta["finalizers"] = self.finalizers
        c = {
            "apiVersion": b.DRA_API,
            "kind": "ResourceClaim",
            "metadata": claim_meta,
            "spec": self.claim_specs[size],
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": b.GPU_DRIVER,
                                "pool": node_name,
                                "device": f"gpu-{d}",
                            }
                            for d in devices
                        ]
                    },
                    "nodeSelector": self.node_selector(node_name),
                    "allocationTimestamp": self.ts(sched),
                },
                "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
            },
        }
        involved = {"kind": "Pod", "namespace": ns, "name": pod_name, "uid": pod_uid, "apiVersion": "v1"}
        kubelet = {"component": "kubelet", "host": node_name}
        return [
            p,
            c,
            self.event(
                involved,
                "Scheduled",
                f"Successfully assigned {ns}/{pod_name} to {node_name}",
                sched,
                sched,
                1,
                "Normal",
                self.scheduler_source,
                rv + 2,
            ),
            self.event(
                involved,
                "Pulled",
                f'Container image "{b.DEFAULT_IMAGE}" already present on machine',
                started - 1,
                started - 1,
                1,
                "Normal",
                kubelet,
                rv + 3,
            ),
            self.event(involved, "Started", "Started container main", started, started, 1, "Normal", kubelet, rv + 4),
        ]

    def pending_workload(self, unit: int) -> list[Obj]:
        seed = self.seed
        times, last = self.churned(unit)
        ns = self.namespaces[_mix(seed, unit, _S_NS) % len(self.namespaces)]
        created = self.unit_start(unit, 0, 0)
        pod_name = f"sweep-{_suffix(_mix(seed, unit, 7), 6)}-{_suffix(_mix(seed, unit, 8))}"
        pod_uid = _uid(seed, unit, 10)
        claim_name = b.generated_claim_name(pod_name, "gpu", pod_uid)
        rv = _mix(seed, unit)
        p = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._meta(pod_name, pod_uid, created, ns, rv, labels={"app": "sweep"}),
            "spec": {
                **self.pending_spec,
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-4"}],
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": self.ts(created + 1),
                        "reason": "Unschedulable",
                        "message": self.unschedulable_message,
                    }
                ],
                "qosClass": "Burstable",
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}],
            },
        }
        c = {
            "apiVersion": b.DRA_API,
            "kind": "ResourceClaim",
            "metadata": self._meta(
                claim_name,
                _uid(seed, unit, 11),
                created,
                ns,
                rv + 1,
                ownerReferences=[
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod_name,
                        "uid": pod_uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                annotations=self.claim_annotations,
                generateName=b.generate_name(pod_name, "gpu"),
            ),
            "spec": self.claim_specs[4],
            "status": {},
        }
        involved = {"kind": "Pod", "namespace": ns, "name": pod_name, "uid": pod_uid, "apiVersion": "v1"}
        # Churn only moves the scheduler's retry count and last attempt.
        last_seen = self.origin_s + last * self.interval_s - 20 if times else created + 300
        return [
            p,
            c,
            self.event(
                involved,
                "FailedScheduling",
                self.unschedulable_message,
                created + 1,
                last_seen,
                3 + 4 * times,
                "Warning",
                self.scheduler_source,
                rv + 2,
            ),
        ]

    def plain_pod(self, unit: int, node_name: str, k: int, spec: Obj, host_ip: str) -> Obj:
        # The bulk of the pods: one base hash feeds every stable choice to keep this cheap.
        times, last = self.churned(unit)
        h = _mix(self.seed, unit)
        # Half the churn restarts the container in place, half replaces the pod (a new ReplicaSet pod).
        restart = times > 0 and (h >> 40) & 1 == 0
        incarnation = 0 if restart else times
        if incarnation == 0:
            created = self.origin_s - 600 - (h % (6 * 86400)) // 60 * 60
            hi = h
        else:
            created = self.unit_start(unit, incarnation, last)
            hi = _mix(self.seed, unit, incarnation)
        if k == 0:
            ns, app = "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"
        elif k == 1:
            ns, app = "monitoring", "node-exporter"
        else:
            ns = self.namespaces[(h >> 8) % len(self.namespaces)]
            app = _PLAIN_APPS[(h >> 24) % len(_PLAIN_APPS)]
        uid_hex = f"{hi:016x}{_mix(hi):016x}"
        uid = f"{uid_hex[:8]}-{uid_hex[8:12]}-{uid_hex[12:16]}-{uid_hex[16:20]}-{uid_hex[20:]}"
        started = created + 15
        cstatus = {
            **self.plain_container_status,
            "containerID": f"containerd://{uid_hex}{times:032x}",
            "restartCount": times if restart else 0,
            "state": self.running_state(started),
        }
        if restart:
            restarted = self.origin_s + last * self.interval_s - 20
            cstatus["state"] = self.running_state(restarted)
            cstatus["lastState"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": self.ts(started),
                    "finishedAt": self.ts(restarted - 1),
                }
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{app}-{_suffix(h >> 3, 6)}-{_suffix(hi >> 23)}",
                "uid": uid,
                "resourceVersion": str(1_000_000 + (hi + times) % 9_000_000),
                "creationTimestamp": self.ts(created),
                "namespace": ns,
                "labels": self.app_labels(app),
            },
            "spec": spec,
            "status": {
                "phase": "Running",
                "conditions": self.running_conditions(created + 1, started),
                "qosClass": "Burstable",
                "containerStatuses": [cstatus],
                "hostIP": host_ip,
                "startTime": self.ts(created),
            },
        }

    def app_labels(self, app: str) -> Obj:
        out = self._labels.get(app)
        if out is None:
            out = self._labels[app] = {"app": app}
        return out

    def event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        first: int,
        last: int,
        count: int,
        type_: str,
        source: Obj,
        key: int,
    ) -> Obj:
        # ``key`` names the event; a later count of the same event keeps name and UID.
        name = f"{involved['name']}.{first * 1_000_000_000 + _mix(key) % 1_000_000_000:x}"
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "uid": _uid(key, 12),
                "resourceVersion": str(1_000_000 + _mix(key, count, last) % 9_000_000),
                "creationTimestamp": self.ts(first),
                "namespace": involved["namespace"],
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "count": count,
            "firstTimestamp": self.ts(first),
            "lastTimestamp": self.ts(last),
            "source": source,
            "reportingComponent": source["component"],
            "reportingInstance": source.get("host", ""),
        }

    def __iter__(self) -> Iterator[Obj]:
        yield from self.cluster_objects()
        for n in range(self.nodes):
            yield from self.node_objects(n)


def iter_synthetic(
    nodes: int,
    gpus_per_node: int = 8,
    at: datetime = SYNTHETIC_BASE,
    *,
    seed: int = 0,
    churn: float = 0.0,
    generation: int = 0,
    interval: timedelta = GENERATION_INTERVAL,
    pods_per_node: int = PODS_PER_NODE,
) -> Iterator[Obj]:
    """The synthetic cluster's objects, one node's worth at a time."""
    return iter(_Generator(nodes, gpus_per_node, at, seed, churn, generation, interval, pods_per_node))


def synthetic_cluster(
    nodes: int,
    gpus_per_node: int = 8,
    at: datetime = SYNTHETIC_BASE,
    *,
    seed: int = 0,
    churn: float = 0.0,
    generation: int = 0,
    interval: timedelta = GENERATION_INTERVAL,
    pods_per_node: int = PODS_PER_NODE,
) -> list[Obj]:
    """A synthetic cluster as a list of objects (see the module docstring).

    ``at`` is this generation's snapshot time; generation 0 is taken to be at
    ``at - generation * interval``, so pass ``generation_time(start, g)`` for
    the generations to line up.
    """
    with gc_paused():
        return list(
            iter_synthetic(
                nodes,
                gpus_per_node,
                at,
                seed=seed,
                churn=churn,
                generation=generation,
                interval=interval,
                pods_per_node=pods_per_node,
            )
        )


def synthetic_list_bytes(
    nodes: int,
    gpus_per_node: int = 8,
    at: datetime = SYNTHETIC_BASE,
    *,
    seed: int = 0,
    churn: float = 0.0,
    generation: int = 0,
    interval: timedelta = GENERATION_INTERVAL,
    pods_per_node: int = PODS_PER_NODE,
) -> bytes:
    """The cluster as the JSON bytes of a v1 List, serialized in chunks so the dicts never all coexist."""
    with gc_paused():
        return _list_bytes(
            iter_synthetic(
                nodes,
                gpus_per_node,
                at,
                seed=seed,
                churn=churn,
                generation=generation,
                interval=interval,
                pods_per_node=pods_per_node,
            )
        )


def _list_bytes(objects: Iterator[Obj]) -> bytes:
    # BytesIO hands back its buffer without a copy, so the peak is one serialized List
    # plus one chunk of dicts.
    out = io.BytesIO()
    out.write(b'{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[')
    chunk: list[Obj] = []
    sep = b""
    for obj in objects:
        chunk.append(obj)
        if len(chunk) >= _CHUNK:
            out.write(sep)
            out.write(memoryview(orjson.dumps(chunk))[1:-1])
            sep, chunk = b",", []
    if chunk:
        out.write(sep)
        out.write(memoryview(orjson.dumps(chunk))[1:-1])
    out.write(b"]}")
    return out.getvalue()
