"""The pages of the 1.37 situations: the Pod page shows its PodGroup (members and their states), the claim page a
PodGroup consumer, the device and inventory pages a DeviceTaintRule's taint with its EvictionInProgress condition."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

from demo import builders as b
from tests import test_gangs as gangs
from tests import test_taints_and_health as taints
from tests.snapshot_cli import AT, import_objects

pytestmark = pytest.mark.django_db

M = timedelta(minutes=1)


def test_pod_page_shows_the_group_and_its_members(admin_client: Client, tmp_path: Path) -> None:
    cond = b.pod_group_scheduled(AT - 8 * M, False, "Unschedulable", gangs.GANG_MESSAGE)
    objects = gangs.platform(
        gangs.TEMPLATE, gangs.group(3, conditions=[cond]), *gangs.member("trainer-0"), *gangs.member("trainer-1")
    )
    import_objects(tmp_path, objects)
    body = admin_client.get(f"/c/demo/pods/{gangs.NS}/trainer-0/").content.decode()
    assert "gang-incomplete" in body
    group = body[body.index('data-testid="pod-group"') :]
    assert "A gang: the scheduler places 3 members together or none" in group
    assert f"PodGroupInitiallyScheduled=False (Unschedulable): {gangs.GANG_MESSAGE}" in group
    members = group[group.index('data-testid="group-members"') : group.index("</table>")]
    assert "<strong>trainer-0</strong>" in members and f"/c/demo/pods/{gangs.NS}/trainer-1/?uid=" in members
    assert members.count("state-pending") == 2


def test_claim_page_shows_a_podgroup_consumer(admin_client: Client, tmp_path: Path) -> None:
    pg, claim = gangs.shared_group()
    import_objects(tmp_path, gangs.platform(gangs.SHARED, pg, claim, gangs.rank(0, claim), gangs.rank(1, claim, "Succeeded")))
    body = admin_client.get(f"/c/demo/claims/{claim['metadata']['uid']}/").content.decode()
    section = body[body.index('data-testid="group-consumer"') :]
    assert "PodGroup ranks" in section and "a gang of minCount 2" in section and "(1 now)" in section
    assert "rank-0" in section and "state-running" in section and "state-terminal" in section


def test_claim_page_says_when_the_podgroup_is_gone(admin_client: Client, tmp_path: Path) -> None:
    pg, claim = gangs.shared_group()
    import_objects(tmp_path, gangs.platform(gangs.SHARED, claim, b.pod_group(gangs.NS, "other", gangs.CREATED, 1)))
    body = admin_client.get(f"/c/demo/claims/{claim['metadata']['uid']}/").content.decode()
    assert "The PodGroup no longer exists" in body
    assert 'PodGroup ranks <span class="state state-deleted">gone</span>' in body


def test_device_and_inventory_pages_show_a_rule_taint_and_its_eviction(admin_client: Client, tmp_path: Path) -> None:
    cond = b.eviction_in_progress(AT - 2 * M, True, "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
    drain = taints.rule("drain-gpu-1", taints.MAINTENANCE, device="gpu-1", conditions=[cond])
    import_objects(tmp_path, taints.platform(drain, *taints.running(conditions=[b.disruption_target(AT - 2 * M)])))
    device = admin_client.get(f"/c/demo/devices/{b.GPU_DRIVER}/{taints.NODE}/gpu-1/").content.decode()
    table = device[device.index('data-testid="device-taints"') :]
    assert "example.com/maintenance=drain" in table and "DeviceTaintRule drain-gpu-1" in table
    assert "EvictionInProgress=True (PodsPendingEviction): 1 pod needs to be evicted in 1 namespace." in table
    inventory = admin_client.get("/c/demo/inventory/").content.decode()
    assert "example.com/maintenance=drain:NoExecute" in inventory
    assert "DeviceTaintRule drain-gpu-1 · EvictionInProgress=True PodsPendingEviction" in inventory
