"""Issue 20 item 1: a flagged claim is flagged on every page that shows it, for admins and for its team only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from access.models import NamespaceGrant
from collector.models import ObjectVersion
from dashboard.leak_flags import release_of
from tests.users import login

pytestmark = pytest.mark.django_db

COMMAND = "kubectl delete resourceclaim -n batch report-gpu"


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    for team in ("batch", "ml-training"):
        NamespaceGrant.objects.create(group=Group.objects.create(name=team), namespace=team)
    return {
        "admin": login("admin", ["platform-admins"]),
        "batch": login("batcher", ["batch"]),
        "other": login("trainer", ["ml-training"]),
    }


def report_uid() -> str:
    return ObjectVersion.objects.filter(kind="ResourceClaim", name="report-gpu").values_list("uid", flat=True)[0]


def nightly_pod() -> str:
    return ObjectVersion.objects.filter(kind="Pod", name__startswith="nightly-report-").values_list("name", flat=True)[0]


def pages() -> dict[str, str]:
    return {
        "claim": f"/c/demo/claims/{report_uid()}/",
        "pod": f"/c/demo/pods/batch/{nightly_pod()}/",
        "device": "/c/demo/devices/gpu.nvidia.com/" + _report_device() + "/",
        "inventory": "/c/demo/inventory/",
        "claims": "/c/demo/claims",
    }


def _report_device() -> str:
    import orjson

    content = (
        ObjectVersion.objects.filter(kind="ResourceClaim", name="report-gpu", deleted=False)
        .order_by("-valid_from")
        .values_list("content", flat=True)[0]
    )
    [result] = orjson.loads(content)["status"]["allocation"]["devices"]["results"]
    return f"{result['pool']}/{result['device']}"


def flag_block(html: str) -> str:
    assert 'data-testid="leak-flag" data-claim="batch/report-gpu"' in html
    return html.split('data-testid="leak-flag" data-claim="batch/report-gpu"', 1)[1].split("</div>", 1)[0]


@pytest.mark.parametrize("who", ["admin", "batch"])
@pytest.mark.parametrize("page", ["claim", "pod", "device", "inventory", "claims"])
def test_the_flag_shows_where_you_land(clients: dict[str, Client], who: str, page: str) -> None:
    response = clients[who].get(pages()[page])
    assert response.status_code == 200
    block = flag_block(response.content.decode())
    assert "orphaned-allocation" in block
    assert 'data-testid="leak-held">' in block and 'data-testid="leak-leaked">' in block
    assert "device-hours held since" in block and "leaked since flagged at" in block
    assert COMMAND in block


def test_the_deleted_pod_says_its_claim_still_holds_the_device(clients: dict[str, Client]) -> None:
    html = clients["admin"].get(pages()["pod"]).content.decode()
    assert 'data-testid="pod-claim-flagged"' in html
    note = html.split('data-testid="pod-claim-flagged"', 1)[1].split("</p>", 1)[0]
    assert "batch/report-gpu still holds" in note and _report_device().split("/")[-1] in note


def test_other_teams_see_no_flag(clients: dict[str, Client]) -> None:
    urls = pages()
    other = clients["other"]
    assert other.get(urls["claim"]).status_code == 404
    assert other.get(urls["pod"]).status_code == 404
    for page in ("device", "inventory", "claims"):
        html = other.get(urls[page]).content.decode()
        assert "report-gpu" not in html and "leak-flag" not in html and COMMAND not in html


def test_release_commands() -> None:
    entry = {"namespace": "ns", "name": "c", "consumers": [{"resource": "pods", "name": "p"}]}
    assert release_of({**entry, "reason": "unreserved-allocation"})["command"] == "kubectl delete resourceclaim -n ns c"
    stuck = release_of({**entry, "reason": "stuck-deletion"})
    assert stuck["command"] == "kubectl get resourceclaim -n ns c -o jsonpath='{.metadata.finalizers}'"
    assert "driver or controller" in stuck["note"]
    assert release_of({**entry, "reason": "held-by-failing-pod"})["command"] == "kubectl delete pod -n ns p"


def test_stored_flags_equal_the_leak_report_at_every_snapshot(demo_history: Any) -> None:
    """The derived rows a page reads (LeakFlag) say what the leak report says, snapshot by snapshot, hours
    counted on read included; only the message (which says for how long) is left out."""
    from collector.models import Snapshot
    from collector.recent_history import open_history
    from derived.reports import covers, leak_flags_read, leaks_read
    from derived.thresholds import leak_thresholds

    flagged_somewhere = False
    for snapshot in Snapshot.objects.order_by("at"):
        history = open_history(snapshot.cluster, snapshot.at)
        assert covers(history)
        report = leaks_read(history, leak_thresholds())["claims"]
        every = ObjectVersion.objects.filter(kind="ResourceClaim").values_list("uid", flat=True).distinct()
        stored = leak_flags_read(history, leak_thresholds(), every)
        expected = sorted(({k: v for k, v in e.items() if k != "message"} for e in report), key=lambda e: e["uid"])
        assert stored == expected, snapshot.at
        flagged_somewhere |= bool(stored)
    assert flagged_somewhere
