"""The demo's shared GPUs (Kubernetes 1.36/1.37): partitions, a share of capacity, an extended resource.

``demo.story`` adds these workloads to every stage; see its docstring table. The
node ``worker-h100-mig-0`` has one H100 PCIe advertised whole and as two
3g.40gb MIG partitions drawing on one counter set, and an L40S with
``allowMultipleAllocations`` handing out shares of its memory.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Protocol

from demo import builders as b

Obj = dict[str, Any]

MIG_NODE = "worker-h100-mig-0"
MIG_CLASS = "mig.nvidia.com"
H100_PCIE: dict[str, Any] = {
    "product": "NVIDIA H100 PCIe",
    "memory": "80Gi",
    "architecture": "Hopper",
    "cuda_compute": "9.0.0",
}
L40S: dict[str, Any] = {
    "product": "NVIDIA L40S",
    "memory": "48Gi",
    "architecture": "Ada Lovelace",
    "cuda_compute": "8.9.0",
}
SHARED_DEVICE = "gpu-1"
PARTITION = "gpu-0-mig-3g-0"
# Shares of the L40S's memory: 8Gi steps from 8Gi up to all 48Gi; a request for 20Gi gets 24Gi.
SHARE_POLICY = b.request_policy(default="8Gi", min="8Gi", step="8Gi", max="48Gi")
SHARE_ASKED, SHARE_GRANTED = "20Gi", "24Gi"

_ATTR = "device.attributes['gpu.nvidia.com']"
SEL_H100_PCIE = f"{_ATTR}.productName == 'NVIDIA H100 PCIe'"
SEL_L40S = f"{_ATTR}.productName == 'NVIDIA L40S'"
SEL_MIG = f"device.driver == '{b.GPU_DRIVER}' && {_ATTR}.type == 'mig'"

# Pod names (namespace, name).
MIG_NOTEBOOK = ("research", "mig-notebook-carol")
WHOLE_H100 = ("ml-training", "h100-bench-7r2mx")
SHARED_INFERENCE = ("inference", "triton-shared-0")
EXTENDED_GPU = ("inference", "whisper-asr-0")
EXTENDED_NODE = "worker-a100-1"
EXTENDED_DEVICE = "gpu-6"
EXTENDED_REQUEST = "container-0-request-2"  # main's requests sorted: cpu, memory, nvidia.com/gpu

_UNSCHEDULABLE = "0/5 nodes are available: 5 cannot allocate all claims."


class Stage(Protocol):
    i: int
    at: datetime
    base: datetime
    t0: datetime

    def add(self, *objs: Obj) -> None: ...

    def stage_at(self, i: int) -> datetime: ...


def _running(
    st: Stage,
    ns_name: tuple[str, str],
    created: datetime,
    node: str,
    devices: list[tuple[str, str, str]],
    **kwargs: Any,
) -> Obj:
    sched, started = created + timedelta(seconds=3), created + timedelta(seconds=40)
    return b.pod(
        ns_name[0],
        ns_name[1],
        created,
        node_name=node,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
        allocated_resources_status=[b.resource_health("gpu", None, devices)] if devices else None,
        **kwargs,
    )


def mig_platform(st: Stage, cluster_born: datetime) -> None:
    """The MIG-capable node, its DeviceClass for partitions, and its two slices (counters apart, 1.35+)."""
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.capable": "true",
        "node.kubernetes.io/instance-type": "a3-h100-pcie-2g",
    }
    st.add(b.node(MIG_NODE, cluster_born, labels=labels, heartbeat=st.at - timedelta(seconds=5)))
    st.add(b.device_class(MIG_CLASS, selectors=[SEL_MIG], created=st.base - timedelta(days=120)))
    counters, devices = b.partitioned_gpu(MIG_NODE, model=H100_PCIE)
    shared = b.shared_gpu(SHARED_DEVICE, MIG_NODE, memory=L40S["memory"], policy=SHARE_POLICY, model=L40S)
    created = cluster_born + timedelta(minutes=12)
    st.add(b.counter_slice(MIG_NODE, [counters], created=created))
    st.add(b.resource_slice(MIG_NODE, [*devices, shared], slice_count=2, created=created))


def mig_notebook(st: Stage) -> None:
    """Healthy: one 3g.40gb partition of the H100 PCIe."""
    ns, _ = MIG_NOTEBOOK
    created = st.base - timedelta(hours=5)
    tpl = b.claim_template(ns, "one-mig-3g", [b.request(device_class=MIG_CLASS)], created=created - timedelta(days=2))
    p = _running(
        st,
        MIG_NOTEBOOK,
        created,
        MIG_NODE,
        [(b.GPU_DRIVER, MIG_NODE, PARTITION)],
        claims=[("gpu", {"template": "one-mig-3g"})],
        labels={"app": "mig-notebook", "user": "carol"},
        image="quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20",
        command=("start-notebook.py",),
    )
    c = b.template_claim(
        tpl, p, allocated=[("gpu", MIG_NODE, PARTITION)], allocated_at=created + timedelta(seconds=3), reserved_for=[p]
    )
    st.add(tpl, p, c)


def whole_h100(st: Stage) -> None:
    """Asks for the whole H100 PCIe; the partition held by the notebook's claim takes half its counters."""
    ns, name = WHOLE_H100
    created = st.t0 - timedelta(minutes=5)
    tpl = b.claim_template(
        ns, "whole-h100-pcie", [b.request(selectors=[SEL_H100_PCIE])], created=st.base - timedelta(days=4)
    )
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpu", {"template": "whole-h100-pcie"})],
        conditions=[b.unschedulable(created + timedelta(seconds=1), _UNSCHEDULABLE)],
        owner=("Job", "h100-bench"),
        labels={"batch.kubernetes.io/job-name": "h100-bench", "job-name": "h100-bench"},
        restart_policy="Never",
        command=("python", "bench.py", "--gpu", "whole"),
    )
    st.add(
        tpl,
        p,
        b.template_claim(tpl, p),
        b.event(
            p,
            "FailedScheduling",
            _UNSCHEDULABLE,
            created + timedelta(seconds=1),
            st.at - timedelta(seconds=40),
            count=2 + 2 * st.i,
            component="default-scheduler",
        ),
    )


def shared_inference(st: Stage) -> None:
    """Healthy: a 24Gi share of the L40S's memory (asked 20Gi, rounded up to the policy's 8Gi steps)."""
    ns, _ = SHARED_INFERENCE
    created = st.base - timedelta(hours=8)
    request = b.with_capacity(b.request(selectors=[SEL_L40S]), {"memory": SHARE_ASKED})
    tpl = b.claim_template(ns, "l40s-share", [request], created=created - timedelta(days=1))
    p = _running(
        st,
        SHARED_INFERENCE,
        created,
        MIG_NODE,
        [(b.GPU_DRIVER, MIG_NODE, SHARED_DEVICE)],
        claims=[("gpu", {"template": "l40s-share"})],
        owner=("StatefulSet", "triton-shared"),
        labels={"app": "triton-shared"},
        image="nvcr.io/nvidia/tritonserver:25.10-py3",
        command=("tritonserver", "--model-repository=/models"),
    )
    share = b.shared_result("gpu", MIG_NODE, SHARED_DEVICE, {"memory": SHARE_GRANTED})
    c = b.template_claim(tpl, p, allocated=[share], allocated_at=created + timedelta(seconds=3), reserved_for=[p])
    st.add(tpl, p, c)


def extended_gpu(st: Stage) -> None:
    """Asks for ``nvidia.com/gpu: 1`` in its container; the scheduler created its claim from the DeviceClass."""
    created = st.base - timedelta(hours=2)
    p = b.with_extended_resources(
        _running(
            st,
            EXTENDED_GPU,
            created,
            EXTENDED_NODE,
            [],
            claims=(),
            owner=("StatefulSet", "whisper-asr"),
            labels={"app": "whisper-asr"},
            image="ghcr.io/ggml-org/whisper.cpp:main-cuda",
            command=("whisper-server", "--model", "large-v3"),
        ),
        {"nvidia.com/gpu": 1},
    )
    c = b.extended_resource_claim(
        p,
        [b.request(EXTENDED_REQUEST)],
        created,
        allocated=[(EXTENDED_REQUEST, EXTENDED_NODE, EXTENDED_DEVICE)],
        allocated_at=created + timedelta(seconds=3),
        reserved_for=[p],
    )
    mapping = [("main", "nvidia.com/gpu", EXTENDED_REQUEST)]
    st.add(b.with_extended_resource_claim_status(p, c["metadata"]["name"], mapping), c)


def extended_claim_name() -> str:
    """The scheduler-created claim's name (its Pod's UID does not depend on the stage)."""
    uid = b.object_uid("Pod", *EXTENDED_GPU)
    return f"{EXTENDED_GPU[1]}-extended-resources-{b.name_suffix('extended', uid)}"


def add_shared_workloads(st: Stage) -> None:
    mig_notebook(st)
    whole_h100(st)
    shared_inference(st)
    extended_gpu(st)
