"""The bundled demo cluster: five snapshots ten minutes apart of a small GPU cluster.

Four GPU nodes (two with 8x A100 40GB, one with 8x H100 80GB, and ``worker-h100-mig-0`` with
one H100 PCIe advertised whole and as two MIG 3g.40gb partitions sharing a counter set, next
to an L40S whose memory is shared by capacity) and a CPU node.
Across the snapshots every boundary fails once, with the evidence a real cluster
leaves behind, next to healthy workloads and ordinary churn:

====================================  =====================================================
workload                              story (stages 0..4, base = stage 4)
====================================  =====================================================
research/llm-finetune                 asks for a GPU with more than 80Gi; nothing has it.
                                      Pending in every stage, FailedScheduling count grows.
ml-training/pretrain-8xh100-q7n4k     Job pod asking for all 8 H100s while 3 are held by
                                      llama-serve-0 and eval-harness; appears in stage 2.
inference/embeddings-0                allocated A100 gpu-3, kubelet's NodePrepareResources
                                      keeps failing; FailedPrepareDynamicResources grows.
ml-training/eval-harness-…-x2kqp      prepared H100 gpu-2, container stuck in
                                      CreateContainerError: unresolvable CDI devices.
batch/nightly-report-…-7x2kq          CronJob pod on direct claim ``report-gpu``: Running
                                      (0), Succeeded (1), gone (2..4) while the claim keeps
                                      its A100 and names the pod in reservedFor.
inference/llama-serve-0               healthy: 2 H100s, running for two days.
ml-training/jupyter-alice-0           StatefulSet pod recreated in stage 2 (new UID, new
                                      generated claim), preparing in 2, running from 3.
research/resnet-sweep-3               prioritized list (A100, else H100); just created and
                                      unscheduled in 1, allocated ``gpu/a100`` and running
                                      from 2.
research/resnet-sweep-0,1,2           earlier trials of the sweep on A100s of worker-a100-1,
                                      running 6h10m-7h30m and gone in stages 1, 2 and 3
                                      (Pod and claim): research's finished holds, which date
                                      h100-bench's wait on the notebook's partition.
research/mig-notebook-carol           healthy: MIG partition gpu-0-mig-3g-0 of the H100 PCIe
                                      (half of its counter set ``gpu-0-counters``).
ml-training/h100-bench-7r2mx          asks for the whole H100 PCIe: devices-in-use, the
                                      notebook's claim holds 40Gi of its counter set; likely
                                      free in ~1h50m, by research's finished holds.
inference/triton-shared-0             healthy: a 24Gi share (asked 20Gi, 8Gi steps) of the
                                      L40S's 48Gi memory (``allowMultipleAllocations``).
inference/whisper-asr-0               healthy: ``nvidia.com/gpu: 1`` in its container, served
                                      by the claim the scheduler created (A100 gpu-6).
====================================  =====================================================

The shared workloads live in ``demo.story_sharing``; the gangs, the PodGroup-shared claim, the taint
eviction and the unhealthy GPU (Kubernetes 1.37) in ``demo.story_gangs``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from demo import builders as b
from demo import story_gangs as gangs
from demo import story_sharing as shared

Obj = dict[str, Any]

STAGE_COUNT = 5
STAGE_SPACING = timedelta(minutes=10)
# A fixed base for tests and fixtures; the app may pass any other.
DEMO_BASE = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

A100_NODES = ("worker-a100-0", "worker-a100-1")
H100_NODE = "worker-h100-0"
CPU_NODE = "worker-cpu-0"
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
ADMIN_NAMESPACE = "gpu-ops"

_SCHEDULER_UNSCHEDULABLE = (
    "0/4 nodes are available: 4 cannot allocate all claims. still not schedulable, "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)

# Selectors, in the DRA CEL environment.
_MEM = "device.capacity['gpu.nvidia.com'].memory"
_ATTR = "device.attributes['gpu.nvidia.com']"
SEL_OVER_80GI = f"{_MEM}.compareTo(quantity('80Gi')) > 0"
SEL_AT_LEAST_80GI = f"{_MEM}.compareTo(quantity('80Gi')) >= 0"
SEL_H100 = f"{_ATTR}.productName == 'NVIDIA H100 80GB HBM3'"
SEL_HOPPER = f"{_ATTR}.architecture == 'Hopper'"
SEL_A100 = f"{_ATTR}.productName.startsWith('NVIDIA A100')"
SEL_CC9 = f"{_ATTR}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0"

# Pod names (namespace, name) — some carry the controller's random suffixes, as in a real cluster.
LLM_FINETUNE = ("research", "llm-finetune")
PRETRAIN = ("ml-training", "pretrain-8xh100-q7n4k")
EMBEDDINGS = ("inference", "embeddings-0")
EVAL_HARNESS = ("ml-training", "eval-harness-6d5f7c9b8-x2kqp")
NIGHTLY_REPORT = ("batch", "nightly-report-29410560-7x2kq")
LLAMA_SERVE = ("inference", "llama-serve-0")
JUPYTER = ("ml-training", "jupyter-alice-0")
RESNET_SWEEP = ("research", "resnet-sweep-3")
REPORT_CLAIM = ("batch", "report-gpu")


def stage_times(base: datetime) -> list[datetime]:
    """Snapshot times, oldest first; the last one is ``base``."""
    return [base - (STAGE_COUNT - 1 - i) * STAGE_SPACING for i in range(STAGE_COUNT)]


def _key(ns_name: tuple[str, str]) -> str:
    return f"{ns_name[0]}/{ns_name[1]}"


def _gen_claim(ns_name: tuple[str, str], incarnation: int = 0, pod_claim: str = "gpu") -> str:
    ns, name = ns_name
    return b.generated_claim_name(name, pod_claim, b.object_uid("Pod", ns, name, incarnation))


class DemoExpectations(TypedDict):
    pods: dict[str, tuple[str | None, str]]
    incarnations: dict[str, int]
    leaks: dict[str, str]
    leak_device_hours: dict[str, float]
    not_leaked: list[str]
    warnings: list[tuple[str, str]]
    stages: dict[int, dict[str, tuple[str | None, str]]]


# What Claimline must say about the demo as of the last stage (``stages`` adds earlier ones).
DEMO_EXPECTATIONS: DemoExpectations = {
    "pods": {
        _key(LLM_FINETUNE): ("allocation", "selector-unsatisfiable"),
        _key(PRETRAIN): ("allocation", "devices-in-use"),
        _key(EMBEDDINGS): ("preparation", "preparation-failed"),
        _key(EVAL_HARNESS): ("runtime", "runtime-injection-failed"),
        _key(LLAMA_SERVE): (None, "ok"),
        _key(JUPYTER): (None, "ok"),
        _key(RESNET_SWEEP): (None, "ok"),
        _key(shared.MIG_NOTEBOOK): (None, "ok"),
        _key(shared.WHOLE_H100): ("allocation", "devices-in-use"),
        _key(shared.SHARED_INFERENCE): (None, "ok"),
        _key(shared.EXTENDED_GPU): (None, "ok"),
        **{_key(rank): (None, "ok") for rank in gangs.DDP_RANKS},
        **{_key(worker): ("allocation", "gang-incomplete") for worker in gangs.ALLREDUCE_WORKERS},
        _key(gangs.RERANKER): ("inventory", "device-taint-eviction"),
        _key(gangs.VIT): ("runtime", "device-unhealthy"),
    },
    "incarnations": {
        _key(LLM_FINETUNE): 1,
        _key(PRETRAIN): 1,
        _key(EMBEDDINGS): 1,
        _key(EVAL_HARNESS): 1,
        _key(LLAMA_SERVE): 1,
        _key(JUPYTER): 2,
        _key(RESNET_SWEEP): 1,
        _key(NIGHTLY_REPORT): 1,
        _key(shared.MIG_NOTEBOOK): 1,
        _key(shared.WHOLE_H100): 1,
        _key(shared.SHARED_INFERENCE): 1,
        _key(shared.EXTENDED_GPU): 1,
        **{_key(pod): 1 for pod in (*gangs.DDP_RANKS, *gangs.ALLREDUCE_WORKERS, gangs.RERANKER, gangs.VIT)},
    },
    "leaks": {_key(REPORT_CLAIM): "orphaned-allocation"},
    # One A100 held since base - 3h.
    "leak_device_hours": {_key(REPORT_CLAIM): 3.0},
    "not_leaked": [
        f"{LLAMA_SERVE[0]}/{_gen_claim(LLAMA_SERVE)}",
        f"{EMBEDDINGS[0]}/{_gen_claim(EMBEDDINGS)}",
        f"{EVAL_HARNESS[0]}/{_gen_claim(EVAL_HARNESS)}",
        f"{JUPYTER[0]}/{_gen_claim(JUPYTER, 1)}",
        f"{RESNET_SWEEP[0]}/{_gen_claim(RESNET_SWEEP)}",
        f"{LLM_FINETUNE[0]}/{_gen_claim(LLM_FINETUNE)}",
        f"{PRETRAIN[0]}/{_gen_claim(PRETRAIN, pod_claim='gpus')}",
        f"{shared.MIG_NOTEBOOK[0]}/{_gen_claim(shared.MIG_NOTEBOOK)}",
        f"{shared.WHOLE_H100[0]}/{_gen_claim(shared.WHOLE_H100)}",
        f"{shared.SHARED_INFERENCE[0]}/{_gen_claim(shared.SHARED_INFERENCE)}",
        f"{shared.EXTENDED_GPU[0]}/{shared.extended_claim_name()}",
        f"{gangs.DDP_GROUP[0]}/{gangs.ddp_claim_name()}",
        f"{gangs.RERANKER[0]}/{_gen_claim(gangs.RERANKER)}",
        f"{gangs.VIT[0]}/{_gen_claim(gangs.VIT)}",
        *(f"{worker[0]}/{_gen_claim(worker)}" for worker in gangs.ALLREDUCE_WORKERS),
    ],
    "warnings": [("admin-access-namespace", ADMIN_NAMESPACE), ("device-taint-rule", gangs.A100_1)],
    "stages": {
        0: {_key(NIGHTLY_REPORT): (None, "ok"), _key(JUPYTER): (None, "ok")},
        1: {_key(RESNET_SWEEP): ("allocation", "waiting-for-scheduler")},
        2: {_key(gangs.VIT): (None, "ok"), _key(gangs.RERANKER): (None, "ok")},
        3: {_key(gangs.VIT): ("runtime", "device-unhealthy"), _key(gangs.RERANKER): (None, "ok")},
    },
}

# Every claim a demo pod references exists in the stages where the pod does.
DEMO_INTENTIONALLY_MISSING: frozenset[str] = frozenset()


class _Stage:
    """Objects of one snapshot; ``i`` is the stage index, ``at`` its time."""

    def __init__(self, i: int, at: datetime, base: datetime) -> None:
        self.i, self.at, self.base = i, at, base
        self.t0 = base - (STAGE_COUNT - 1) * STAGE_SPACING
        self.objects: list[Obj] = []

    def add(self, *objs: Obj) -> None:
        self.objects.extend(objs)

    def stage_at(self, i: int) -> datetime:
        return self.t0 + i * STAGE_SPACING


def demo_stages(base: datetime) -> list[list[Obj]]:
    """The demo cluster's snapshots, oldest first, each a list of API objects."""
    times = stage_times(base)
    stages = []
    for i, at in enumerate(times):
        st = _Stage(i, at, base)
        _platform(st)
        _healthy_llama(st)
        _cdi_failure(st)
        _prep_failure(st)
        _selector_unsatisfiable(st)
        _devices_in_use(st)
        _retained_claim(st)
        _recreated_notebook(st)
        _finished_sweep_trials(st)
        _prioritized_sweep(st)
        shared.add_shared_workloads(st)
        gangs.add_gang_workloads(st)
        stages.append(st.objects)
    return stages


def demo_snapshots(base: datetime) -> list[tuple[datetime, list[Obj]]]:
    return list(zip(stage_times(base), demo_stages(base), strict=True))


# --- platform -----------------------------------------------------------------------------------


def _platform(st: _Stage) -> None:
    base = st.base
    cluster_born = base - timedelta(days=90)
    st.add(b.device_class(created=base - timedelta(days=120), extended_resource_name="nvidia.com/gpu"))
    for ns, labels in (
        ("default", None),
        ("kube-system", None),
        (DRIVER_NAMESPACE, {"pod-security.kubernetes.io/enforce": "privileged"}),
        ("ml-training", {"team": "foundation-models"}),
        ("inference", {"team": "serving"}),
        ("research", {"team": "research"}),
        ("batch", {"team": "analytics"}),
    ):
        st.add(b.namespace(ns, labels, created=cluster_born))
    # Lets its users request adminAccess to any device: an audit warning, by design.
    st.add(b.namespace(ADMIN_NAMESPACE, {"team": "platform"}, created=base - timedelta(days=30), admin_access=True))

    gpu_labels = {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"}
    nodes = [
        (A100_NODES[0], b.A100_40GB, "a2-highgpu-8g"),
        (A100_NODES[1], b.A100_40GB, "a2-highgpu-8g"),
        (H100_NODE, b.H100_80GB, "a3-highgpu-8g"),
    ]
    for name, model, instance in nodes:
        labels = {**gpu_labels, "node.kubernetes.io/instance-type": instance}
        st.add(b.node(name, cluster_born, labels=labels, heartbeat=st.at - timedelta(seconds=7)))
        st.add(b.resource_slice(name, b.gpu_devices(name, 8, model), created=cluster_born + timedelta(minutes=12)))
        st.add(_driver_plugin_pod(name, cluster_born + timedelta(minutes=10)))
    shared.mig_platform(st, cluster_born)
    st.add(
        b.node(
            CPU_NODE,
            cluster_born,
            labels={"node.kubernetes.io/instance-type": "n2-standard-32"},
            heartbeat=st.at - timedelta(seconds=3),
            cpu="31850m",
            memory="126Gi",
        )
    )


def _driver_plugin_pod(node_name: str, created: datetime) -> Obj:
    name = f"nvidia-dra-driver-gpu-kubelet-plugin-{b.name_suffix(node_name)}"
    return b.pod(
        DRIVER_NAMESPACE,
        name,
        created,
        claims=(),
        node_name=node_name,
        phase="Running",
        conditions=b.running_conditions(created, created + timedelta(seconds=40)),
        container_state=b.state_running(created + timedelta(seconds=40)),
        owner=("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"),
        labels={"app.kubernetes.io/name": "nvidia-dra-driver-gpu", "component": "kubelet-plugin"},
        image="registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v25.12.0",
        command=("gpu-kubelet-plugin",),
        container_name="gpus",
        cpu="100m",
        memory="256Mi",
    )


# --- workloads ------------------------------------------------------------------------------------


def _healthy_llama(st: _Stage) -> None:
    """Two H100s, prepared, container running and reported healthy."""
    ns, name = LLAMA_SERVE
    created = st.base - timedelta(days=2)
    sched, started = created + timedelta(seconds=20), created + timedelta(minutes=3)
    tpl = b.claim_template(
        ns, "h100-pair", [b.request(count=2, selectors=[SEL_HOPPER])], created=created - timedelta(hours=1)
    )
    devices = [(b.GPU_DRIVER, H100_NODE, "gpu-0"), (b.GPU_DRIVER, H100_NODE, "gpu-1")]
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpu", {"template": "h100-pair"})],
        node_name=H100_NODE,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
        owner=("StatefulSet", "llama-serve"),
        labels={"app": "llama-serve"},
        image="vllm/vllm-openai:v0.11.0",
        command=("vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "2"),
        allocated_resources_status=[b.resource_health("gpu", None, devices)],
    )
    c = b.template_claim(
        tpl,
        p,
        allocated=[("gpu", H100_NODE, "gpu-0"), ("gpu", H100_NODE, "gpu-1")],
        allocated_at=sched,
        reserved_for=[p],
    )
    st.add(tpl, p, c)


def _cdi_failure(st: _Stage) -> None:
    """Prepared (sandbox ready), but containerd cannot resolve the claim's CDI device."""
    ns, name = EVAL_HARNESS
    created = st.t0 - timedelta(minutes=6)
    sched = created + timedelta(seconds=4)
    sandbox = created + timedelta(seconds=50)
    tpl = b.claim_template(
        ns, "one-h100", [b.request(selectors=[SEL_AT_LEAST_80GI])], created=st.base - timedelta(days=20)
    )
    pod_uid = b.object_uid("Pod", ns, name)
    claim_name = b.generated_claim_name(name, "gpu", pod_uid)
    claim_uid = b.object_uid("ResourceClaim", ns, claim_name)
    message = (
        "failed to create containerd container: failed to inject CDI devices: "
        f"unresolvable CDI devices k8s.gpu.nvidia.com/claim={claim_uid}-gpu-2"
    )
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpu", {"template": "one-h100"})],
        node_name=H100_NODE,
        conditions=b.stuck_conditions(sched, sandbox_ready=True, at=sandbox),
        container_state=b.state_waiting("CreateContainerError", message),
        owner=("ReplicaSet", "eval-harness-6d5f7c9b8"),
        labels={"app": "eval-harness", "pod-template-hash": "6d5f7c9b8"},
        command=("python", "-m", "lm_eval", "--model", "hf", "--tasks", "mmlu"),
    )
    c = b.template_claim(tpl, p, allocated=[("gpu", H100_NODE, "gpu-2")], allocated_at=sched, reserved_for=[p])
    first_failure = sandbox + timedelta(seconds=12)
    st.add(
        tpl,
        p,
        c,
        b.event(
            p,
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {H100_NODE}",
            sched,
            type="Normal",
            component="default-scheduler",
        ),
        b.event(
            p,
            "Failed",
            f"Error: {message}",
            first_failure,
            st.at - timedelta(seconds=25),
            count=4 + 5 * st.i,
            field_path="spec.containers{main}",
        ),
    )


def _prep_failure(st: _Stage) -> None:
    """Allocated and reserved on worker-a100-1, but NodePrepareResources keeps failing."""
    ns, name = EMBEDDINGS
    node_name = A100_NODES[1]
    created = st.t0 - timedelta(minutes=4)
    sched = created + timedelta(seconds=3)
    tpl = b.claim_template(ns, "one-gpu", [b.request()], created=st.base - timedelta(days=45))
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpu", {"template": "one-gpu"})],
        node_name=node_name,
        conditions=b.stuck_conditions(sched, sandbox_ready=False),
        owner=("StatefulSet", "embeddings"),
        labels={"app": "embeddings"},
        image="ghcr.io/huggingface/text-embeddings-inference:1.8",
        command=("text-embeddings-router", "--model-id", "BAAI/bge-large-en-v1.5"),
    )
    c = b.template_claim(tpl, p, allocated=[("gpu", node_name, "gpu-3")], allocated_at=sched, reserved_for=[p])
    cname, cuid = c["metadata"]["name"], c["metadata"]["uid"]
    message = (
        f"Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim {cname}: "
        f"error preparing devices for claim {ns}/{cname}:{cuid}: prepare devices failed: "
        f"unable to get device spec for {cuid}-gpu-3: device handle from UUID: Not Found"
    )
    st.add(
        tpl,
        p,
        c,
        b.event(
            p,
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {node_name}",
            sched,
            type="Normal",
            component="default-scheduler",
        ),
        b.event(
            p,
            "FailedPrepareDynamicResources",
            message,
            sched + timedelta(seconds=2),
            st.at - timedelta(seconds=45),
            count=4 + 4 * st.i,
        ),
    )


def _selector_unsatisfiable(st: _Stage) -> None:
    """More than 80Gi: the H100s have exactly 80Gi, the A100s 40Gi."""
    ns, name = LLM_FINETUNE
    created = st.t0 - timedelta(minutes=3)
    tpl = b.claim_template(ns, "gpu-over-80gi", [b.request(selectors=[SEL_OVER_80GI])], created=created)
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpu", {"template": "gpu-over-80gi"})],
        conditions=[b.unschedulable(created + timedelta(seconds=1), _SCHEDULER_UNSCHEDULABLE)],
        labels={"app": "llm-finetune", "user": "bob"},
        command=("torchrun", "--nproc-per-node", "1", "finetune.py", "--model", "llama-3.1-8b"),
    )
    c = b.template_claim(tpl, p)
    st.add(
        tpl,
        p,
        c,
        b.event(
            p,
            "FailedScheduling",
            _SCHEDULER_UNSCHEDULABLE,
            created + timedelta(seconds=1),
            st.at - timedelta(seconds=50),
            count=3 + 3 * st.i,
            component="default-scheduler",
        ),
    )


def _devices_in_use(st: _Stage) -> None:
    """All eight H100s match, but llama-serve-0 and eval-harness hold three of them."""
    if st.i < 2:
        return
    ns, name = PRETRAIN
    created = st.stage_at(2) - timedelta(minutes=7)
    tpl = b.claim_template(
        ns, "eight-h100", [b.request(count=8, selectors=[SEL_H100])], created=st.base - timedelta(days=10)
    )
    p = b.pod(
        ns,
        name,
        created,
        claims=[("gpus", {"template": "eight-h100"})],
        conditions=[b.unschedulable(created + timedelta(seconds=2), _SCHEDULER_UNSCHEDULABLE)],
        owner=("Job", "pretrain-8xh100"),
        labels={"batch.kubernetes.io/job-name": "pretrain-8xh100", "job-name": "pretrain-8xh100"},
        restart_policy="Never",
        command=("torchrun", "--nproc-per-node", "8", "pretrain.py"),
        cpu="96",
        memory="900Gi",
    )
    c = b.template_claim(tpl, p)
    st.add(
        tpl,
        p,
        c,
        b.event(
            p,
            "FailedScheduling",
            _SCHEDULER_UNSCHEDULABLE,
            created + timedelta(seconds=2),
            st.at - timedelta(seconds=70),
            count=2 + 4 * (st.i - 2),
            component="default-scheduler",
        ),
    )


def _retained_claim(st: _Stage) -> None:
    """A CronJob pod that finished and was garbage-collected; its claim still holds the A100."""
    ns, name = NIGHTLY_REPORT
    node_name = A100_NODES[0]
    claim_created = st.base - timedelta(hours=3, minutes=10)
    created = st.base - timedelta(hours=3, minutes=1)
    allocated_at = st.base - timedelta(hours=3)
    started = allocated_at + timedelta(minutes=3)
    finished = st.stage_at(1) - timedelta(minutes=3)
    common: dict[str, Any] = {
        "claims": [("gpu", {"claim": "report-gpu"})],
        "node_name": node_name,
        "owner": ("Job", "nightly-report-29410560"),
        "labels": {
            "batch.kubernetes.io/job-name": "nightly-report-29410560",
            "job-name": "nightly-report-29410560",
        },
        "restart_policy": "Never",
        "command": ("python", "report.py", "--date", "yesterday"),
    }
    if st.i == 0:
        p = b.pod(
            ns,
            name,
            created,
            phase="Running",
            conditions=b.running_conditions(allocated_at, started),
            container_state=b.state_running(started),
            **common,
        )
    else:
        p = b.pod(
            ns,
            name,
            created,
            phase="Succeeded",
            conditions=b.completed_conditions(allocated_at, finished),
            container_state=b.state_terminated(started, finished),
            **common,
        )
    c = b.claim(
        ns,
        "report-gpu",
        [b.request(selectors=[SEL_A100])],
        claim_created,
        allocated=[("gpu", node_name, "gpu-5")],
        allocated_at=allocated_at,
        reserved_for=[p],  # never cleaned up: the pod is named even after it is gone
        labels={"app": "nightly-report"},
    )
    st.add(c)
    if st.i <= 1:  # the Job's ttlSecondsAfterFinished removes the pod after stage 1
        st.add(p)


def _recreated_notebook(st: _Stage) -> None:
    """jupyter-alice-0 is deleted and recreated by its StatefulSet just before stage 2."""
    ns, name = JUPYTER
    node_name = A100_NODES[0]
    tpl = b.claim_template(ns, "one-a100", [b.request(selectors=[SEL_A100])], created=st.base - timedelta(days=60))
    common: dict[str, Any] = {
        "claims": [("gpu", {"template": "one-a100"})],
        "node_name": node_name,
        "owner": ("StatefulSet", "jupyter-alice"),
        "labels": {"app": "jupyter", "user": "alice"},
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20",
        "command": ("start-notebook.py",),
        "cpu": "4",
        "memory": "32Gi",
    }
    st.add(tpl)
    if st.i <= 1:
        created = st.base - timedelta(days=1)
        sched, started = created + timedelta(seconds=2), created + timedelta(seconds=75)
        p = b.pod(
            ns,
            name,
            created,
            phase="Running",
            conditions=b.running_conditions(sched, started),
            container_state=b.state_running(started),
            **common,
        )
        c = b.template_claim(tpl, p, allocated=[("gpu", node_name, "gpu-0")], allocated_at=sched, reserved_for=[p])
        st.add(p, c)
        return
    created = st.stage_at(2) - timedelta(seconds=90)
    sched = created + timedelta(seconds=2)
    started = st.stage_at(2) + timedelta(seconds=50)
    if st.i == 2:
        p = b.pod(
            ns,
            name,
            created,
            incarnation=1,
            conditions=b.stuck_conditions(sched, sandbox_ready=False),
            **common,
        )
        events = [
            b.event(
                p,
                "Scheduled",
                f"Successfully assigned {ns}/{name} to {node_name}",
                sched,
                type="Normal",
                component="default-scheduler",
            ),
        ]
    else:
        p = b.pod(
            ns,
            name,
            created,
            incarnation=1,
            phase="Running",
            conditions=b.running_conditions(sched, started),
            container_state=b.state_running(started),
            allocated_resources_status=[b.resource_health("gpu", None, [(b.GPU_DRIVER, node_name, "gpu-0")])],
            **common,
        )
        events = [
            b.event(
                p,
                "Scheduled",
                f"Successfully assigned {ns}/{name} to {node_name}",
                sched,
                type="Normal",
                component="default-scheduler",
            ),
            b.event(
                p,
                "Started",
                "Started container main",
                started,
                type="Normal",
                field_path="spec.containers{main}",
            ),
        ]
    c = b.template_claim(tpl, p, allocated=[("gpu", node_name, "gpu-0")], allocated_at=sched, reserved_for=[p])
    st.add(p, c, *events)


# Earlier trials of the sweep: each held an A100 of worker-a100-1 for hours and finished during the
# story (gone by the stage named), so research's history has finished holds to date a wait by.
SWEEP_TRIALS = (
    (("research", "resnet-sweep-0"), "gpu-0", timedelta(hours=6, minutes=10), 1),
    (("research", "resnet-sweep-1"), "gpu-4", timedelta(hours=6, minutes=50), 2),
    (("research", "resnet-sweep-2"), "gpu-5", timedelta(hours=7, minutes=30), 3),
)


def _sweep_template(st: _Stage) -> Obj:
    return b.claim_template(
        RESNET_SWEEP[0],
        "a100-or-h100",
        [
            b.first_available_request(
                "gpu",
                [b.subrequest("a100", selectors=[SEL_A100]), b.subrequest("h100", selectors=[SEL_CC9])],
            )
        ],
        created=st.base - timedelta(days=3),
    )


def _finished_sweep_trials(st: _Stage) -> None:
    """resnet-sweep-0..2 ran on A100s for 6-7.5 h; each Pod and its claim are gone from the stage named.
    The sweep's template (sweep-3's too) is added here, in every stage."""
    node_name = A100_NODES[1]
    tpl = _sweep_template(st)
    st.add(tpl)
    for index, ((ns, name), device, held, gone_in) in enumerate(SWEEP_TRIALS):
        if st.i >= gone_in:
            continue
        sched = st.stage_at(gone_in) - held
        started = sched + timedelta(seconds=45)
        p = b.pod(
            ns,
            name,
            sched - timedelta(seconds=6),
            node_name=node_name,
            phase="Running",
            conditions=b.running_conditions(sched, started),
            container_state=b.state_running(started),
            allocated_resources_status=[b.resource_health("gpu", None, [(b.GPU_DRIVER, node_name, device)])],
            claims=[("gpu", {"template": "a100-or-h100"})],
            labels={"app": "resnet-sweep", "sweep-index": str(index)},
            command=("python", "train_resnet.py", "--lr", ("0.1", "0.03", "0.01")[index]),
        )
        c = b.template_claim(tpl, p, allocated=[("gpu/a100", node_name, device)], allocated_at=sched, reserved_for=[p])
        st.add(p, c)


def _prioritized_sweep(st: _Stage) -> None:
    """firstAvailable: an A100 if there is one, else an H100; created just before stage 1."""
    if st.i < 1:
        return
    ns, name = RESNET_SWEEP
    node_name = A100_NODES[1]
    tpl = _sweep_template(st)
    created = st.stage_at(1) - timedelta(seconds=8)
    common: dict[str, Any] = {
        "claims": [("gpu", {"template": "a100-or-h100"})],
        "labels": {"app": "resnet-sweep", "sweep-index": "3"},
        "command": ("python", "train_resnet.py", "--lr", "0.003"),
    }
    if st.i == 1:
        p = b.pod(ns, name, created, **common)  # the scheduler has not looked at it yet
        st.add(p, b.template_claim(tpl, p))
        return
    sched = st.stage_at(1) + timedelta(seconds=5)
    started = sched + timedelta(seconds=45)
    p = b.pod(
        ns,
        name,
        created,
        node_name=node_name,
        phase="Running",
        conditions=b.running_conditions(sched, started),
        container_state=b.state_running(started),
        # kubelet names the entry after the container's claim entry (no request here), not the result's subrequest
        allocated_resources_status=[b.resource_health("gpu", None, [(b.GPU_DRIVER, node_name, "gpu-0")])],
        **common,
    )
    c = b.template_claim(tpl, p, allocated=[("gpu/a100", node_name, "gpu-0")], allocated_at=sched, reserved_for=[p])
    st.add(
        p,
        c,
        b.event(
            p,
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {node_name}",
            sched,
            type="Normal",
            component="default-scheduler",
        ),
        b.event(p, "Started", "Started container main", started, type="Normal", field_path="spec.containers{main}"),
    )
