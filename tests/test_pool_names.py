"""A pool name may hold slashes (DNS subdomains separated by ``/``, e.g. ``worker-1/gpus``): its devices
have pages, and every page that names a device links to it."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import resolve, reverse

from collector.models import ObjectVersion
from demo import builders as b
from tests.clusters import T0

pytestmark = pytest.mark.django_db

POOL = "worker-1/gpus"  # legal: two DNS subdomains separated by a slash
DEVICE_URL = f"/c/demo/devices/{b.GPU_DRIVER}/{POOL}/gpu-0/"


def _cluster_with_a_slashed_pool(at: Any) -> list[dict[str, Any]]:
    created = at - timedelta(days=30)
    started = at - timedelta(hours=2)
    pod = b.pod(
        "team-a", "train-0", started, claims=[("gpu", {"claim": "train-0-gpu"})], node_name="worker-1",
        phase="Running", conditions=b.running_conditions(started, started + timedelta(minutes=1)),
        container_state=b.state_running(started + timedelta(minutes=1)),
    )
    return [
        b.device_class(created=created),
        b.namespace("team-a", created=created),
        b.node("worker-0", created=created, heartbeat=at),
        b.node("worker-1", created=created, heartbeat=at),
        b.resource_slice("worker-0", b.gpu_devices("worker-0", 2), created=created),
        b.resource_slice("worker-1", b.gpu_devices("worker-1", 2), pool=POOL, created=created),
        pod,
        b.claim(
            "team-a", "train-0-gpu", [b.request()], started, allocated=[("gpu", POOL, "gpu-0")], node="worker-1",
            allocated_at=started, reserved_for=[pod],
        ),
    ]


@pytest.fixture
def slashed(tmp_path: Path) -> None:
    dump = tmp_path / "slashed.json"
    dump.write_bytes(b.dump_json(_cluster_with_a_slashed_pool(T0)))
    call_command("import-snapshot", str(dump), "--at", T0.isoformat())


def _device_links(page: str) -> list[str]:
    return [html.unescape(u) for u in re.findall(r'href="(/c/demo/devices/[^"]*)"', page)]


def _get(client: Client, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_a_device_url_keeps_a_pool_with_slashes_whole() -> None:
    url = reverse("device", args=["demo", b.GPU_DRIVER, POOL, "gpu-0"])
    assert url == DEVICE_URL
    assert resolve(url).kwargs == {"cluster": "demo", "driver": b.GPU_DRIVER, "pool": POOL, "name": "gpu-0"}
    assert resolve("/c/demo/devices/gpu.nvidia.com/worker-0/gpu-1/").kwargs["pool"] == "worker-0"


def test_a_pool_with_a_slash_has_device_pages_linked_from_every_page(admin_client: Client, slashed: None) -> None:
    inventory = _get(admin_client, "/c/demo/inventory/")
    assert DEVICE_URL in _device_links(inventory)
    device = _get(admin_client, DEVICE_URL)
    assert f"Device {b.GPU_DRIVER} {POOL}/gpu-0" in device and "team-a/train-0-gpu" in device
    assert admin_client.get(f"/c/demo/devices/{b.GPU_DRIVER}/{POOL}/gpu-9/").status_code == 404

    claim_uid = ObjectVersion.objects.get(kind="ResourceClaim", name="train-0-gpu").uid
    pages = {
        "inventory": inventory,
        "claim": _get(admin_client, f"/c/demo/claims/{claim_uid}/"),
        "pod": _get(admin_client, "/c/demo/pods/team-a/train-0/"),
        "device": device,
        "playground": _get(admin_client, "/c/demo/playground/", expression="true"),
    }
    for name, page in pages.items():
        links = _device_links(page)
        if name != "device":  # the device page links other devices of its counter sets only
            assert DEVICE_URL in links, name
        for link in links:
            assert admin_client.get(link).status_code == 200, (name, link)
    assert _device_links(pages["playground"]).count(DEVICE_URL) == 1
