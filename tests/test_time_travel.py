"""Issue 20 item 3: time travel without typing URLs. The header's time picker (and "live"), internal links
that keep the chosen ``as_of``, and the Pod page's steps to the previous / next stored change of the Pod;
for an admin and for ``alice`` (team ml-training)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from django.test import Client

from collector.models import ObjectVersion, Snapshot
from domain.cluster.timefmt import rfc3339
from tests.users import admin_and_alice

pytestmark = pytest.mark.django_db


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    return admin_and_alice()


def snapshot_times() -> list[Any]:
    return list(Snapshot.objects.order_by("at").values_list("at", flat=True))


def internal_links(html: str) -> list[str]:
    return [u.replace("&amp;", "&") for u in re.findall(r'\s(?:href|hx-get)="((?:/c/|\?)[^"]*)"', html)]


def a_pod(namespace: str) -> tuple[str, str]:
    """A Pod of ``namespace`` with more than one stored change."""
    for name in ObjectVersion.objects.filter(kind="Pod", namespace=namespace).values_list("name", flat=True).distinct():
        if ObjectVersion.objects.filter(kind="Pod", namespace=namespace, name=name).count() > 1:
            return namespace, name
    raise AssertionError(f"no Pod of {namespace} changed twice")


@pytest.mark.parametrize("who", ["admin", "alice"])
@pytest.mark.parametrize(
    "page", ["/c/demo/", "/c/demo/claims", "/c/demo/pods/", "/c/demo/inventory/", "/c/demo/retained/"]
)
def test_every_internal_link_keeps_the_chosen_time(clients: dict[str, Client], who: str, page: str) -> None:
    as_of = rfc3339(snapshot_times()[1])
    response = clients[who].get(page, {"as_of": as_of})
    assert response.status_code == 200
    html = response.content.decode()
    links = internal_links(html)
    assert links
    for link in links:
        assert "as_of=" in link, link
    kept = [link for link in links if f"as_of={as_of.replace(':', '%3A').replace('+', '%2B')}" in link]
    live = [link for link in links if link.endswith("as_of=")]
    assert len(kept) + len(live) == len(links) and live, (links, as_of)
    # The picker shows the chosen time, the search box sends it along.
    assert f'value="{snapshot_times()[1].strftime("%Y-%m-%dT%H:%M:%S")}"' in html
    assert f'<input type="hidden" name="as_of" value="{as_of}">' in html


def test_live_pages_link_without_a_time(clients: dict[str, Client]) -> None:
    html = clients["admin"].get("/c/demo/claims").content.decode()
    assert all("as_of=" not in link for link in internal_links(html))
    assert 'data-testid="live-now"' in html and 'data-testid="time-picker"' in html


def test_a_picked_time_is_read_as_utc_and_redirected_to_rfc3339(clients: dict[str, Client]) -> None:
    at = snapshot_times()[1]
    picked = at.strftime("%Y-%m-%dT%H:%M")
    response = clients["admin"].get("/c/demo/claims", {"as_of": picked, "namespace": "batch"})
    assert response.status_code == 302
    assert unquote(response["Location"]) == f"/c/demo/claims?as_of={at.strftime('%Y-%m-%dT%H:%M')}:00Z&namespace=batch"
    page = clients["admin"].get(response["Location"])
    assert page.status_code == 200 and f"As of snapshot {at.strftime('%Y-%m-%d %H:%M')}" in page.content.decode()


def test_the_claims_list_reads_the_chosen_time(clients: dict[str, Client]) -> None:
    first, last = snapshot_times()[0], snapshot_times()[-1]
    old = clients["admin"].get("/c/demo/claims", {"as_of": rfc3339(first)}).content.decode()
    new = clients["admin"].get("/c/demo/claims").content.decode()
    assert f"As of snapshot {first.strftime('%Y-%m-%d %H:%M:%S')}" in old
    assert f"As of snapshot {last.strftime('%Y-%m-%d %H:%M:%S')}" in new


@pytest.mark.parametrize("who", ["admin", "alice"])
def test_the_pod_page_steps_to_the_previous_and_next_change(clients: dict[str, Client], who: str) -> None:
    namespace, name = a_pod("ml-training")
    changes = sorted(
        set(
            ObjectVersion.objects.filter(kind="Pod", namespace=namespace, name=name).values_list(
                "snapshot__at", flat=True
            )
        )
    )
    assert len(changes) > 1
    client = clients[who]
    url = f"/c/demo/pods/{namespace}/{name}/"
    # As of the second change: a step back to the first, a step on to the third (or none).
    html = client.get(url, {"as_of": rfc3339(changes[1])}).content.decode()
    previous = re.search(r'href="([^"]*)" data-testid="previous-change"', html)
    assert previous is not None
    assert (
        previous[1].replace("&amp;", "&")
        == f"{url}?as_of={rfc3339(changes[0]).replace(':', '%3A').replace('+', '%2B')}"
    )
    following = re.search(r'href="([^"]*)" data-testid="next-change"', html)
    if len(changes) > 2:
        assert following is not None and rfc3339(changes[2]).replace(":", "%3A")[:16] in following[1]
    # Live: the newest change has nothing after it; the page between two changes steps to both.
    live = client.get(url).content.decode()
    assert "no later change stored" in live and 'data-testid="previous-change"' in live
    between = client.get(url, {"as_of": rfc3339(changes[0] + timedelta(seconds=1))}).content.decode()
    assert "no earlier change stored" in between
    assert 'data-testid="next-change"' in between


def test_alice_cannot_step_through_another_teams_pod(clients: dict[str, Client]) -> None:
    namespace, name = a_pod("research")
    assert (
        clients["alice"].get(f"/c/demo/pods/{namespace}/{name}/", {"as_of": rfc3339(snapshot_times()[1])}).status_code
        == 404
    )


def test_the_playground_matches_against_the_cluster_as_of_the_time_picked(clients: dict[str, Client]) -> None:
    """A100 gpu-4 of worker-a100-1 was held by the sweep's trial resnet-sweep-1 until stage 2 and is free
    now: the playground answers for the time asked, and its form keeps that time."""
    first = rfc3339(snapshot_times()[0])
    asked = {"expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"}
    admin = clients["admin"]

    def gpu_4(html: str) -> str:
        rows = [r for r in html.split("<tr>") if "<td>worker-a100-1</td>" in r and ">gpu-4<" in r]
        assert len(rows) == 1, html
        return rows[0]

    now = admin.get("/c/demo/playground/", asked).content.decode()
    assert "<td>yes</td>" in gpu_4(now) and "Available now" in now
    then = admin.get("/c/demo/playground/", {**asked, "as_of": first}).content.decode()
    assert "allocated to research/resnet-sweep-1-gpu-" in gpu_4(then)
    assert f'<input type="hidden" name="as_of" value="{first}">' in then
    assert "Available as of 2026-11-20 11:20:00 UTC" in then
