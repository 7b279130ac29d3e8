"""The demo's Kubernetes 1.37 workloads: gangs (``scheduling.k8s.io/v1beta1`` PodGroups), a claim a PodGroup's
members share, a NoExecute DeviceTaintRule evicting a Pod, and a GPU kubelet reports Unhealthy.

====================================  =====================================================
workload                              story (stages 0..4, base = stage 4)
====================================  =====================================================
research/ddp-rank-0, ddp-rank-1       healthy: a gang of two (PodGroup ``ddp-ranks``) sharing
                                      one claim of two A100s the PodGroup owns (reservedFor
                                      names the group), running for a day.
ml-training/allreduce-worker-0..2     a gang of minCount 4 (PodGroup ``allreduce``) with three
                                      members, created in stage 3: gang-incomplete.
inference/reranker-0                  runs on A100 gpu-7 of worker-a100-1; in stage 4 the
                                      DeviceTaintRule ``drain-a100-1-gpu-7`` (NoExecute) makes
                                      the eviction controller delete it: device-taint-eviction.
research/vit-pretrain-0               runs on A100 gpu-3 of worker-a100-0; from stage 3
                                      kubelet reports that GPU Unhealthy: device-unhealthy.
====================================  =====================================================
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from demo import builders as b
from demo.story_sharing import Stage

Obj = dict[str, Any]

A100_0, A100_1 = "worker-a100-0", "worker-a100-1"
SEL_A100 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"

DDP_GROUP = ("research", "ddp-ranks")
DDP_RANKS = (("research", "ddp-rank-0"), ("research", "ddp-rank-1"))
DDP_DEVICES = ("gpu-1", "gpu-2")
ALLREDUCE_GROUP = ("ml-training", "allreduce")
ALLREDUCE_MIN = 4
ALLREDUCE_WORKERS = tuple(("ml-training", f"allreduce-worker-{i}") for i in range(3))
RERANKER = ("inference", "reranker-0")
RERANKER_DEVICE = "gpu-7"
DRAIN_RULE = "drain-a100-1-gpu-7"
DRAIN_TAINT_KEY = "gpu.nvidia.com/maintenance"
VIT = ("research", "vit-pretrain-0")
VIT_DEVICE = "gpu-3"
XID_MESSAGE = "XID 79: GPU has fallen off the bus"


def _running(
    ns_name: tuple[str, str], created: datetime, node: str, health: list[Obj] | None = None, **kwargs: Any
) -> Obj:
    sched, started = created + timedelta(seconds=3), created + timedelta(seconds=50)
    conditions = [*b.running_conditions(sched, started), *kwargs.pop("extra_conditions", [])]
    return b.pod(
        ns_name[0],
        ns_name[1],
        created,
        node_name=node,
        phase="Running",
        conditions=conditions,
        container_state=b.state_running(started),
        allocated_resources_status=health,
        **kwargs,
    )


def ddp_ranks(st: Stage) -> None:
    """Healthy: two ranks of a gang share the two A100s their PodGroup's claim holds."""
    ns, group_name = DDP_GROUP
    created = st.base - timedelta(days=1)
    tpl = b.claim_template(
        ns, "ddp-a100-pair", [b.request(count=2, selectors=[SEL_A100])], created=created - timedelta(days=3)
    )
    workload = b.workload(ns, "ddp", created, [("ranks", 2)], controller=("Job", "ddp"))
    scheduled = b.pod_group_scheduled(created + timedelta(seconds=5), True, "Scheduled")
    claim_name = ddp_claim_name()
    group = b.pod_group(
        ns,
        group_name,
        created,
        2,
        claims=[b.pod_group_claim_entry("gpus", template="ddp-a100-pair")],
        claim_statuses={"gpus": claim_name},
        conditions=[scheduled],
        workload=("ddp", "ranks"),
    )
    devices = [("gpu", A100_0, d) for d in DDP_DEVICES]  # the template's request
    claim = b.group_claim(
        tpl, group, "gpus", allocated=devices, allocated_at=created + timedelta(seconds=4), reserved_for=[group]
    )
    health = [b.resource_health("gpus", None, [(b.GPU_DRIVER, A100_0, d) for d in DDP_DEVICES])]
    ranks = [
        _running(
            rank,
            created + timedelta(seconds=1),
            A100_0,
            health,
            claims=[("gpus", {"template": "ddp-a100-pair"})],
            claim_statuses={"gpus": claim_name},
            owner=("Job", "ddp"),
            labels={"batch.kubernetes.io/job-name": "ddp", "job-name": "ddp"},
            pod_group=group_name,
            restart_policy="Never",
            command=("torchrun", "--nnodes", "2", "train_vit.py"),
        )
        for rank in DDP_RANKS
    ]
    st.add(tpl, workload, group, claim, *ranks)


def allreduce_gang(st: Stage) -> None:
    """A gang of minCount 4 whose Job created three workers so far: the scheduler holds them all."""
    if st.i < 3:
        return
    ns, group_name = ALLREDUCE_GROUP
    created = st.stage_at(3) - timedelta(minutes=2)
    tpl = b.claim_template(ns, "allreduce-a100", [b.request(selectors=[SEL_A100])], created=created)
    workload = b.workload(ns, "allreduce", created, [("workers", ALLREDUCE_MIN)], controller=("Job", "allreduce"))
    group = b.pod_group(ns, group_name, created, ALLREDUCE_MIN, workload=("allreduce", "workers"))
    st.add(tpl, workload, group)
    for i, worker in enumerate(ALLREDUCE_WORKERS):
        p = b.pod(
            *worker,
            created + timedelta(seconds=2 + i),
            claims=[("gpu", {"template": "allreduce-a100"})],
            owner=("Job", "allreduce"),
            labels={"batch.kubernetes.io/job-name": "allreduce", "job-name": "allreduce"},
            pod_group=group_name,
            restart_policy="Never",
            command=("torchrun", "--nnodes", str(ALLREDUCE_MIN), "allreduce_bench.py"),
        )
        st.add(p, b.template_claim(tpl, p))


def drained_reranker(st: Stage) -> None:
    """Running on A100 gpu-7; in the last stage a NoExecute DeviceTaintRule on that GPU gets it evicted."""
    ns, name = RERANKER
    created = st.base - timedelta(hours=6)
    tpl = b.claim_template(ns, "reranker-a100", [b.request(selectors=[SEL_A100])], created=created - timedelta(days=1))
    common: dict[str, Any] = {
        "claims": [("gpu", {"template": "reranker-a100"})],
        "owner": ("StatefulSet", "reranker"),
        "labels": {"app": "reranker"},
        "image": "ghcr.io/huggingface/text-embeddings-inference:1.8",
        "command": ("text-embeddings-router", "--model-id", "BAAI/bge-reranker-v2-m3"),
    }
    health = [b.resource_health("gpu", None, [(b.GPU_DRIVER, A100_1, RERANKER_DEVICE)])]
    if st.i < 4:
        p = _running(RERANKER, created, A100_1, health, **common)
        events: list[Obj] = []
    else:
        marked = st.base - timedelta(minutes=2)
        p = _running(
            RERANKER,
            created,
            A100_1,
            health,
            deletion_timestamp=marked,
            grace_period=600,  # the server drains its requests first
            extra_conditions=[b.disruption_target(marked)],
            **common,
        )
        added = st.base - timedelta(minutes=3)
        rule = b.device_taint_rule(
            DRAIN_RULE,
            b.taint(DRAIN_TAINT_KEY, "NoExecute", "xid-79", time_added=added),
            added,
            pool=A100_1,
            device=RERANKER_DEVICE,
            conditions=[
                b.eviction_in_progress(marked, True, "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
            ],
        )
        events = [
            rule,
            b.event(
                p,
                "DeviceTaintManagerEviction",
                "Marking for deletion",
                marked,
                type="Normal",
                component="device-taint-eviction-controller",
            ),
        ]
    c = b.template_claim(
        tpl,
        p,
        allocated=[("gpu", A100_1, RERANKER_DEVICE)],
        allocated_at=created + timedelta(seconds=3),
        reserved_for=[p],
    )
    st.add(tpl, p, c, *events)


def unhealthy_vit(st: Stage) -> None:
    """Running on A100 gpu-3 of worker-a100-0; from stage 3 kubelet reports the GPU Unhealthy."""
    ns, _ = VIT
    created = st.base - timedelta(hours=20)
    tpl = b.claim_template(ns, "vit-a100", [b.request(selectors=[SEL_A100])], created=created - timedelta(days=2))
    device = [(b.GPU_DRIVER, A100_0, VIT_DEVICE)]
    if st.i < 3:
        health = [b.resource_health("gpu", None, device)]
    else:
        health = [b.resource_health("gpu", None, device, "Unhealthy", XID_MESSAGE)]
    p = _running(
        VIT,
        created,
        A100_0,
        health,
        claims=[("gpu", {"template": "vit-a100"})],
        owner=("Job", "vit-pretrain"),
        labels={"batch.kubernetes.io/job-name": "vit-pretrain", "job-name": "vit-pretrain"},
        restart_policy="Never",
        command=("python", "train_vit.py", "--epochs", "90"),
    )
    c = b.template_claim(
        tpl, p, allocated=[("gpu", A100_0, VIT_DEVICE)], allocated_at=created + timedelta(seconds=3), reserved_for=[p]
    )
    st.add(tpl, p, c)


def ddp_claim_name() -> str:
    """The claim the resourceclaim controller generated for the ddp-ranks PodGroup."""
    ns, group_name = DDP_GROUP
    return b.group_claim_name(group_name, "gpus", b.object_uid("PodGroup", ns, group_name))


def add_gang_workloads(st: Stage) -> None:
    ddp_ranks(st)
    allreduce_gang(st)
    drained_reranker(st)
    unhealthy_vit(st)
