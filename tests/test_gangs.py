"""Gangs (scheduling.k8s.io/v1beta1 PodGroups, Kubernetes 1.37): a Pod of a gang is judged with its group, and a
claim a PodGroup holds lives as long as the group has members that are not done. Each situation next to its healthy
look-alike, imported with import-snapshot and read back with ``explain --json`` and ``leaks --json``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo import builders as b
from tests.snapshot_cli import AT, cli_json, import_objects

pytestmark = pytest.mark.django_db

NS = "ml"
NODE = "worker-0"
CREATED = AT - timedelta(days=3)
M = timedelta(minutes=1)
H = timedelta(hours=1)
GANG_MESSAGE = "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"

Obj = dict[str, Any]


def platform(*extra: Obj, gpus: int = 4) -> list[Obj]:
    return [
        b.namespace(NS, created=CREATED),
        b.device_class(created=CREATED),
        b.node(NODE, CREATED),
        b.resource_slice(NODE, b.gpu_devices(NODE, gpus), created=CREATED),
        *extra,
    ]


def group(min_count: int | None, name: str = "trainers", **kwargs: Any) -> Obj:
    return b.pod_group(NS, name, AT - 20 * M, min_count, workload=("trainers", "workers"), **kwargs)


TEMPLATE = b.claim_template(NS, "two-gpus", [b.request(count=2)], created=CREATED)


def member(name: str, group_name: str = "trainers", **kwargs: Any) -> list[Obj]:
    """An unscheduled member of the group with its own generated claim (two GPUs)."""
    pod = b.pod(
        NS,
        name,
        AT - 10 * M,
        claims=[("gpu", {"template": "two-gpus"})],
        conditions=[b.unschedulable(AT - 9 * M, "pod group is unschedulable")],
        pod_group=group_name,
        **kwargs,
    )
    return [pod, b.template_claim(TEMPLATE, pod)]


def holder(devices: list[str]) -> Obj:
    """Another team's claim holding some of the node's GPUs."""
    results = [("gpu", NODE, d) for d in devices]
    return b.claim(NS, "other", [b.request(count=len(devices))], CREATED, allocated=results, allocated_at=CREATED)


def explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list[Obj], pod: str) -> dict[str, Any]:
    import_objects(tmp_path, objects)
    doc: dict[str, Any] = cli_json(capsys, "explain", f"{NS}/{pod}")
    return doc


# --- gang-incomplete ------------------------------------------------------------------------------------


def test_fewer_members_than_min_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cond = b.pod_group_scheduled(AT - 8 * M, False, "Unschedulable", GANG_MESSAGE)
    objects = platform(TEMPLATE, group(3, conditions=[cond]), *member("trainer-0"), *member("trainer-1"))
    doc = explain(tmp_path, capsys, objects, "trainer-0")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "gang-incomplete"), verdict
    assert verdict["message"].startswith(
        "gang ml/trainers needs 3 members placed together (PodGroup minCount 3), but only 2 exist "
        "(trainer-0, trainer-1): the scheduler places none of them until 1 more is created"
    )
    assert f'the scheduler reported on the group: "{GANG_MESSAGE}"' in verdict["message"]
    shown = doc["group"]
    assert (shown["name"], shown["policy"], shown["minCount"], shown["workload"]) == ("trainers", "gang", 3, "trainers")
    assert [(m["name"], m["state"]) for m in shown["members"]] == [("trainer-0", "pending"), ("trainer-1", "pending")]
    assert shown["condition"]["reason"] == "Unschedulable"
    # Its sibling says the same.
    assert cli_json(capsys, "explain", f"{NS}/trainer-1")["verdict"]["reason"] == "gang-incomplete"


def test_a_gated_member_keeps_the_gang_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = platform(
        TEMPLATE, group(2), *member("trainer-0"), *member("trainer-1", scheduling_gates=["example.com/quota"])
    )
    verdict = explain(tmp_path, capsys, objects, "trainer-0")["verdict"]
    assert verdict["reason"] == "gang-incomplete"
    assert "2 exist, but only 1 can be scheduled (trainer-1: scheduling gates example.com/quota)" in verdict["message"]


def test_a_missing_podgroup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = explain(tmp_path, capsys, platform(TEMPLATE, *member("trainer-0", "gone")), "trainer-0")["verdict"]
    assert verdict["reason"] == "gang-incomplete"
    assert "names PodGroup ml/gone in spec.schedulingGroup, which does not exist" in verdict["message"]


# --- members that fit alone but not together -------------------------------------------------------------


def test_members_that_fit_alone_but_not_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 4 GPUs, one held by another claim: each member's two fit in the three free, both members' four do not.
    objects = platform(TEMPLATE, holder(["gpu-3"]), group(2), *member("trainer-0"), *member("trainer-1"))
    doc = explain(tmp_path, capsys, objects, "trainer-0")
    verdict = doc["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == ("allocation", "devices-in-use"), verdict
    message = verdict["message"]
    assert message.startswith(
        "gang ml/trainers needs 2 members placed together (PodGroup minCount 2), but only 1 of its 2 members "
        "fit together (trainer-0); with their devices taken, member trainer-1 does not:"
    )
    assert "ml/other (1)" in message and "ml/trainer-0-gpu-" in message  # the holders, the sibling among them
    assert doc["group"]["placed"] == 1
    assert [m.get("fits") for m in doc["group"]["members"]] == [True, False]
    assert cli_json(capsys, "explain", f"{NS}/trainer-1")["verdict"]["message"] == message


def test_a_gang_that_fits_together_waits_for_the_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = platform(TEMPLATE, group(2), *member("trainer-0"), *member("trainer-1"))
    doc = explain(tmp_path, capsys, objects, "trainer-0")
    assert doc["verdict"]["reason"] == "waiting-for-scheduler", doc["verdict"]
    assert doc["group"]["placed"] == 2


def test_bound_members_count_as_placed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sched = AT - 5 * M
    bound = b.pod(
        NS, "trainer-0", AT - 10 * M, claims=[("gpu", {"template": "two-gpus"})], node_name=NODE,
        conditions=b.stuck_conditions(sched, sandbox_ready=False), pod_group="trainers",
    )
    claim = b.template_claim(
        TEMPLATE, bound, allocated=[("gpu", NODE, "gpu-0"), ("gpu", NODE, "gpu-1")], allocated_at=sched, reserved_for=[bound]
    )
    objects = platform(TEMPLATE, holder(["gpu-3"]), group(2), bound, claim, *member("trainer-1"))
    verdict = explain(tmp_path, capsys, objects, "trainer-1")["verdict"]
    assert verdict["reason"] == "devices-in-use"
    assert "only 1 of its 2 members fit together (trainer-0); with their devices taken, member trainer-1" in verdict["message"]


def test_a_basic_group_places_each_member_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = platform(TEMPLATE, holder(["gpu-3"]), group(None), *member("trainer-0"), *member("trainer-1"))
    doc = explain(tmp_path, capsys, objects, "trainer-1")
    assert doc["verdict"]["reason"] == "waiting-for-scheduler"
    assert doc["group"]["policy"] == "basic"


def test_a_members_own_missing_claim_comes_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lone = b.pod(NS, "trainer-0", AT - 10 * M, claims=[("gpu", {"claim": "nope"})], pod_group="trainers")
    verdict = explain(tmp_path, capsys, platform(group(2), lone), "trainer-0")["verdict"]
    assert verdict["reason"] == "claim-missing"


# --- claims a PodGroup holds ------------------------------------------------------------------------------

SHARED = b.claim_template(NS, "shared-gpus", [b.request(count=2)], created=CREATED)


def shared_group(created: datetime = AT - 3 * H, **kwargs: Any) -> tuple[Obj, Obj]:
    """A gang of two sharing one PodGroup claim (two GPUs), allocated and reserved for the group."""
    pg = b.pod_group(NS, "ranks", created, 2, claims=[b.pod_group_claim_entry("shared", template="shared-gpus")], **kwargs)
    claim = b.group_claim(
        SHARED, pg, "shared", allocated=[("gpu", NODE, "gpu-0"), ("gpu", NODE, "gpu-1")],
        allocated_at=created + M, reserved_for=[pg],
    )
    pg["status"]["resourceClaimStatuses"] = [{"name": "shared", "resourceClaimName": claim["metadata"]["name"]}]
    return pg, claim


def rank(i: int, claim: Obj, phase: str = "Running", claim_statuses: bool = True) -> Obj:
    created = AT - 3 * H + 2 * M
    started = created + M
    kwargs: dict[str, Any] = {}
    if phase == "Running":
        kwargs.update(conditions=b.running_conditions(created, started), container_state=b.state_running(started))
    else:
        finished = AT - H
        kwargs.update(
            conditions=b.completed_conditions(created, finished), container_state=b.state_terminated(started, finished)
        )
    statuses = {"shared": claim["metadata"]["name"]} if claim_statuses else []
    return b.pod(
        NS, f"rank-{i}", created, claims=[("shared", {"template": "shared-gpus"})], node_name=NODE, phase=phase,
        claim_statuses=statuses, pod_group="ranks", **kwargs,
    )


def leaks(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in cli_json(capsys, "leaks")["claims"]}


def test_a_claim_shared_through_a_live_podgroup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg, claim = shared_group()
    # rank-1's status does not name the claim yet: it resolves through the PodGroup's status.
    objects = platform(SHARED, pg, claim, rank(0, claim), rank(1, claim, claim_statuses=False))
    for pod in ("rank-0", "rank-1"):
        doc = explain(tmp_path, capsys, objects, pod) if pod == "rank-0" else cli_json(capsys, "explain", f"{NS}/{pod}")
        assert doc["verdict"]["reason"] == "ok", doc["verdict"]
        assert doc["claims"][0]["name"] == claim["metadata"]["name"]
    assert doc["group"]["claims"] == [{"name": "shared", "template": "shared-gpus", "claim": claim["metadata"]["name"]}]
    assert leaks(capsys) == {}


def test_a_claim_reserved_for_a_podgroup_that_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg, claim = shared_group()
    import_objects(tmp_path, platform(SHARED, pg, claim, rank(0, claim), rank(1, claim)), AT - 40 * M)
    # The group and its Pods go (kubectl delete), the claim stays allocated and reserved for the group.
    other = holder(["gpu-3"])
    import_objects(tmp_path, [*platform(SHARED, claim), other, b.pod_group(NS, "unrelated", CREATED, 1)], AT - 30 * M)
    import_objects(tmp_path, [*platform(SHARED, claim), other, b.pod_group(NS, "unrelated", CREATED, 1)], AT)
    flagged = leaks(capsys)[claim["metadata"]["name"]]
    assert flagged["reason"] == "orphaned-allocation"
    assert flagged["consumers"][0]["resource"] == "podgroups" and flagged["consumers"][0]["state"] == "gone"
    assert flagged["observed_since"] == b.ts(AT - 30 * M)
    assert "PodGroup ranks was deleted at" in flagged["message"]
    assert flagged["owner"]["workload"] == "PodGroup/ranks"


def test_a_claim_of_a_podgroup_whose_members_all_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg, claim = shared_group()
    objects = platform(SHARED, pg, claim, rank(0, claim, "Succeeded"), rank(1, claim, "Succeeded"))
    import_objects(tmp_path, objects)
    flagged = leaks(capsys)[claim["metadata"]["name"]]
    assert flagged["reason"] == "orphaned-allocation"
    assert "PodGroup ranks its 2 members finished or gone (2 finished)" in flagged["message"]
    assert flagged["observed_since"] == b.ts(AT - H)


def test_one_member_running_keeps_the_group_live(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg, claim = shared_group()
    import_objects(tmp_path, platform(SHARED, pg, claim, rank(0, claim, "Succeeded"), rank(1, claim)))
    assert leaks(capsys) == {}


def test_a_new_member_rederives_its_siblings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Only a Pod changes (the new member uses no claim of its own): the stored documents of the members
    # already there must follow, the waiting one's verdict and the running one's list of members.
    shared_pg, shared_claim = shared_group()
    first = platform(SHARED, shared_pg, shared_claim, rank(0, shared_claim), TEMPLATE, group(2), *member("trainer-0"))
    import_objects(tmp_path, first, AT - M)
    assert cli_json(capsys, "explain", f"{NS}/trainer-0")["verdict"]["reason"] == "gang-incomplete"
    newcomer = b.pod(NS, "trainer-1", AT - 2 * M, claims=(), pod_group="trainers")
    late_rank = b.pod(NS, "rank-1", AT - 2 * M, claims=(), pod_group="ranks")
    import_objects(tmp_path, [*first, newcomer, late_rank], AT)
    doc = cli_json(capsys, "explain", f"{NS}/trainer-0")
    assert doc["verdict"]["reason"] == "waiting-for-scheduler", doc["verdict"]
    assert [m["name"] for m in doc["group"]["members"]] == ["trainer-0", "trainer-1"]
    running = cli_json(capsys, "explain", f"{NS}/rank-0")
    assert [(m["name"], m["state"]) for m in running["group"]["members"]] == [("rank-0", "running"), ("rank-1", "pending")]


def test_a_podgroup_change_rederives_its_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = platform(TEMPLATE, group(3), *member("trainer-0"), *member("trainer-1"))
    import_objects(tmp_path, objects, AT - M)
    assert cli_json(capsys, "explain", f"{NS}/trainer-1")["verdict"]["reason"] == "gang-incomplete"
    smaller = [group(2) if o["kind"] == "PodGroup" else o for o in objects]
    import_objects(tmp_path, smaller, AT)
    assert cli_json(capsys, "explain", f"{NS}/trainer-1")["verdict"]["reason"] == "waiting-for-scheduler"
