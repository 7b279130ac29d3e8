"""The inventory and device pages show counter sets and shares of capacity (the demo's worker-h100-mig-0)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from access.models import NamespaceGrant
from demo import builders as b
from demo import story_sharing as shared
from demo.story import DEMO_BASE, demo_snapshots
from domain.cluster.state import MemoryHistory
from domain.inventory.devices import Inventory
from domain.inventory.shared_usage import counter_set_usage, counter_sets_of, shared_device_usage

GPU = b.GPU_DRIVER
NODE = shared.MIG_NODE


def _claim_name(ns_name: tuple[str, str]) -> str:
    ns, name = ns_name
    return f"{ns}/{b.generated_claim_name(name, 'gpu', b.object_uid('Pod', ns, name))}"


NOTEBOOK_CLAIM = _claim_name(shared.MIG_NOTEBOOK)
SHARE_CLAIM = _claim_name(shared.SHARED_INFERENCE)


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return Inventory.of(MemoryHistory(demo_snapshots(DEMO_BASE)).state)


def test_counter_set_usage_names_the_partition_and_its_claim(inventory: Inventory) -> None:
    [usage] = counter_set_usage(inventory)
    assert (usage["node"], usage["name"], usage["devices"]) == (
        NODE, "gpu-0-counters", ["gpu-0", "gpu-0-mig-3g-0", "gpu-0-mig-3g-1"]
    )
    assert {c["name"]: (c["total"], c["used"], c["free"]) for c in usage["counters"]} == {
        "memory": ("80Gi", "40Gi", "40Gi"),
        "compute-slices": ("7", "3", "4"),
    }
    [holder] = usage["holders"]
    assert (holder["claim"], holder["device"], holder["takes"], holder["fraction"]) == (
        NOTEBOOK_CLAIM, shared.PARTITION, "memory 40Gi, compute-slices 3", 0.5
    )
    assert counter_sets_of(inventory, (GPU, NODE, "gpu-0")) == [usage]
    assert counter_sets_of(inventory, (GPU, NODE, shared.SHARED_DEVICE)) == []


def test_shared_device_usage_gives_remaining_capacity_and_each_share(inventory: Inventory) -> None:
    usage = shared_device_usage(inventory, (GPU, NODE, shared.SHARED_DEVICE))
    assert usage is not None
    assert usage["capacities"] == [{"name": "memory", "total": "48Gi", "used": "24Gi", "free": "24Gi"}]
    [share] = usage["shares"]
    assert (share["claim"], share["consumed"], share["fraction"]) == (SHARE_CLAIM, "memory 24Gi", 0.5)
    assert share["share_id"]
    assert shared_device_usage(inventory, (GPU, NODE, "gpu-0")) is None  # not shareable


@pytest.fixture
def member(demo_history: Any) -> Client:
    """A member of ml-training: the research and inference claims are other teams'."""
    team = Group.objects.create(name="ml-training")
    NamespaceGrant.objects.create(group=team, namespace="ml-training")
    user = User.objects.create_user("member")
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_inventory_page_shows_the_counter_set_used_and_free(admin_client: Client, demo_history: Any) -> None:
    body = admin_client.get("/c/demo/inventory/").content.decode()
    table = body.split(f'data-counter-set="{NODE}/gpu-0-counters"', 1)[1].split("</table>", 1)[0]
    memory = table.split('data-counter="memory">', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="counter-used">40Gi<' in memory and 'data-testid="counter-free">40Gi<' in memory
    assert NOTEBOOK_CLAIM in table and f">{shared.PARTITION}</a>" in table and "50% of the GPU" in table


@pytest.mark.django_db
def test_device_page_of_a_shared_device_shows_remaining_capacity_and_holders(
    admin_client: Client, demo_history: Any
) -> None:
    body = admin_client.get(f"/c/demo/devices/{GPU}/{NODE}/{shared.SHARED_DEVICE}/").content.decode()
    assert 'data-testid="capacity-remaining">24Gi<' in body
    shares = body.split('data-testid="device-shares"', 1)[1].split("</table>", 1)[0]
    assert SHARE_CLAIM in shares and "memory 24Gi" in shares
    partition = admin_client.get(f"/c/demo/devices/{GPU}/{NODE}/gpu-0/").content.decode()
    assert 'data-counter-set="' in partition and NOTEBOOK_CLAIM in partition


@pytest.mark.django_db
def test_other_teams_holders_keep_their_amounts_not_their_names(member: Client) -> None:
    inventory = member.get("/c/demo/inventory/").content.decode()
    table = inventory.split('data-testid="counter-set"', 1)[1].split("</table>", 1)[0]
    assert "(another namespace)" in table and "mig-notebook" not in table and "memory 40Gi" in table
    device = member.get(f"/c/demo/devices/{GPU}/{NODE}/{shared.SHARED_DEVICE}/").content.decode()
    assert "triton-shared" not in device and "memory 24Gi" in device


@pytest.mark.django_db
def test_overview_says_which_models_count_gpu_equivalents(admin_client: Client, demo_history: Any) -> None:
    body = admin_client.get("/c/demo/").content.decode()
    note = body.split('data-testid="gpu-equivalents-note">', 1)[1].split("</p>", 1)[0]
    assert note.startswith(f"{shared.H100_PCIE['product']}, {shared.L40S['product']}:")
    row = body.split(f'data-model="{shared.H100_PCIE["product"]}">', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">1</td><td class="num">0.5</td><td class="num">0.5</td>' in row
