"""Issue 20 item 6: the inventory and device pages tell the truth about partitions.

A whole GPU whose counter set a partition holds in part is not free: the pages say it is blocked by the
counters (naming the partitions), as the allocator and the playground say; device counts and GPU counts
are labelled and explained; a device page shows what its slice advertises; an admin is not told of claims
"you may see". Signed in as the platform admin and as alice (team ml-training, sees only that namespace).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from demo import builders as b
from demo import story_sharing as shared
from demo.story import DEMO_BASE, demo_snapshots
from domain.allocator.matching import match_devices
from domain.cluster.state import MemoryHistory
from domain.inventory.devices import Inventory
from domain.inventory.shared_usage import counter_blocked

GPU = b.GPU_DRIVER
NODE = shared.MIG_NODE
WHOLE = "gpu-0"
FREE_PARTITION = "gpu-0-mig-3g-1"
NOTEBOOK = shared.MIG_NOTEBOOK[1]  # research's notebook holds the other partition


def _section(body: str, marker: str, end: str = "</table>") -> str:
    return body.split(marker, 1)[1].split(end, 1)[0]


def _row(body: str, device: str) -> str:
    """The inventory row of one device of the MIG node."""
    link = f'/c/demo/devices/{GPU}/{NODE}/{device}/">{device}</a>'
    return "<tr>" + body.split(link, 1)[1].split("</tr>", 1)[0]


@pytest.fixture(scope="module")
def state() -> Any:
    return MemoryHistory(demo_snapshots(DEMO_BASE)).state


@pytest.fixture
def clients(demo_clients: dict[str, Client]) -> dict[str, Client]:
    return demo_clients


def test_the_blocked_whole_gpu_is_what_match_devices_calls_unavailable(state: Any) -> None:
    inventory = Inventory.of(state)
    blocked = counter_blocked(inventory)
    assert set(blocked) == {(GPU, NODE, WHOLE)}
    entry = blocked[(GPU, NODE, WHOLE)]
    assert (entry["counter_set"], entry["counter"], entry["free"], entry["total"], entry["needed"]) == (
        "gpu-0-counters",
        "memory",
        "40Gi",
        "80Gi",
        "80Gi",
    )
    assert [(h["device"], h["namespace"]) for h in entry["holders"]] == [(shared.PARTITION, "research")]
    # The playground's answer for the same devices: the whole GPU unavailable on the same counter, the free
    # partition available.
    matched = {
        m["device"]: m for m in match_devices(state, f"device.driver == '{GPU}'")["matched"] if m["pool"] == NODE
    }
    assert matched[WHOLE]["available"] is False
    assert matched[WHOLE]["unavailable"].startswith("counter set gpu-0-counters: memory 40Gi of 80Gi free")
    assert matched[FREE_PARTITION].get("available", True) is True
    assert (GPU, NODE, FREE_PARTITION) not in blocked


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_inventory_says_the_whole_gpu_is_blocked_by_the_partitions_counters(
    clients: dict[str, Client], who: str
) -> None:
    body = clients[who].get("/c/demo/inventory/").content.decode()
    row = _row(body, WHOLE)
    assert 'data-testid="blocked">blocked by counters<' in row and ">free<" not in row
    assert "counter set <code>gpu-0-counters</code>: memory 40Gi of 80Gi free, the device needs 80Gi" in row
    assert f'/c/demo/devices/{GPU}/{NODE}/{shared.PARTITION}/">{shared.PARTITION}</a>' in row
    if who == "admin":
        assert NOTEBOOK in row
    else:
        assert NOTEBOOK not in row and "(another namespace)" in row
    assert ">free<" in _row(body, FREE_PARTITION)
    counts = _section(body, 'data-testid="inventory-counts">', "</p>")
    assert "28 devices advertised: 14 held, 1 blocked by shared counters, 13 free." in counts


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_inventory_and_overview_explain_devices_against_gpus(clients: dict[str, Client], who: str) -> None:
    inventory = clients[who].get("/c/demo/inventory/").content.decode()
    note = _section(inventory, 'data-testid="devices-vs-gpus">', "</p>")
    assert f"{NODE}: {WHOLE}, {shared.PARTITION}, {FREE_PARTITION}" in note
    assert "these 28 devices are 26 physical GPUs" in note and "GPU-equivalents" in note
    overview = clients[who].get("/c/demo/").content.decode()
    devices = _section(overview, 'data-testid="overview-devices">', "</article>")
    assert ">GPUs advertised</th>" in devices and ">Allocated (GPU-eq.)</th>" in devices
    assert '<th class="num">26</th>' in devices  # the total of physical GPUs
    why = _section(devices, 'data-testid="gpus-vs-devices">', "</p>")
    assert "a partitionable GPU counts once here" in why and "each of its partitions" in why


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_device_page_shows_attributes_capacity_and_why_it_is_not_free(clients: dict[str, Client], who: str) -> None:
    body = clients[who].get(f"/c/demo/devices/{GPU}/{NODE}/{WHOLE}/").content.decode()
    facts = _section(body, 'data-testid="device-facts">', "</dl>")
    assert f"<dt>Model</dt><dd>{shared.H100_PCIE['product']}</dd>" in facts
    assert '<dt>UUID</dt><dd><code class="ident">GPU-' in facts and "<dt>Driver version</dt><dd>5" in facts
    now = _section(facts, 'data-testid="device-availability">', "</dd>")
    assert "blocked by counters" in now and shared.PARTITION in now and (NOTEBOOK in now) is (who == "admin")
    attributes = _section(body, 'data-testid="device-attributes"')
    assert f'data-attribute="{GPU}/productName"><td><code>productName</code></td><td>string</td>' in attributes
    assert f'data-attribute="{GPU}/driverVersion"><td><code>driverVersion</code></td><td>version</td>' in attributes
    assert 'data-attribute="resource.kubernetes.io/pciBusID"' in attributes
    capacity = _section(body, 'data-testid="device-capacity-advertised"')
    assert 'data-capacity="memory"><td><code>memory</code></td><td>80Gi</td>' in capacity


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["admin", "alice"])
def test_no_claim_wording_depends_on_what_the_reader_may_see(clients: dict[str, Client], who: str) -> None:
    body = clients[who].get(f"/c/demo/devices/{GPU}/{NODE}/{WHOLE}/").content.decode()
    claims = _section(body, 'data-testid="device-claims"')
    if who == "admin":
        assert "No claim held this device." in claims and "you may see" not in claims
    else:
        assert "No claim you may see held this device." in claims


@pytest.mark.django_db
def test_shared_device_policy_reads_as_words(clients: dict[str, Client]) -> None:
    body = clients["admin"].get(f"/c/demo/devices/{GPU}/{NODE}/{shared.SHARED_DEVICE}/").content.decode()
    capacity = _section(body, 'data-testid="device-capacity-advertised"')
    assert "<td>48Gi</td><td>default 8Gi; from 8Gi to 48Gi in steps of 8Gi</td>" in capacity
    now = _section(body, 'data-testid="device-availability">', "</dd>")
    assert now.startswith("held by ")
