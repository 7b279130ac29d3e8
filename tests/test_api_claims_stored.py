"""``/api/claims`` without ``limit``: the stored entries joined are, byte for byte, the document the entries
computed on read make (``JsonResponse``), for a platform admin and for a team member."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.http import JsonResponse
from django.test import Client

from access.models import NamespaceGrant
from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from dashboard.claim_entries import claim_entries, claim_url, claim_url_json
from derived.models import ClaimListing
from derived.reading import claim_key, claims_read
from domain.cluster.claim_summaries import claim_summaries
from domain.cluster.timefmt import rfc3339
from domain.reports.redaction import Scope
from tests.story_counts import TEAM

pytestmark = pytest.mark.django_db


def _computed(history: StoredHistory, scope: Scope) -> bytes:
    """The document as the API made it before entries were stored: decoded listings, then JsonResponse."""
    claims = claim_entries(history, claims_read(history, scope))
    return JsonResponse({"as_of": rfc3339(history.as_of), "claims": claims}).content


def _member(namespace: str) -> Client:
    group = Group.objects.create(name=f"team-{namespace}")
    NamespaceGrant.objects.create(group=group, namespace=namespace)
    user = User.objects.create_user(f"member-{namespace}")
    user.groups.add(group)
    client = Client()
    client.force_login(user)
    return client


def test_every_claim_is_the_stored_entries_byte_for_byte(demo_history: Any, admin_client: Client) -> None:
    cluster = Cluster.objects.get(name="demo")
    assert ClaimListing.objects.filter(cluster=cluster).exclude(entry="").exists()
    for snapshot in Snapshot.objects.filter(cluster=cluster).order_by("at"):
        history = StoredHistory(cluster, snapshot.at)
        as_of = rfc3339(snapshot.at)
        response = admin_client.get("/api/claims", {"cluster": "demo", "as_of": as_of}, secure=True)
        assert response.status_code == 200 and response["Content-Type"] == "application/json"
        assert response.content == _computed(history, Scope(admin=True))
        # The same claims the state holds, in the list's order.
        on_read = sorted(claim_summaries(history.state), key=claim_key)
        assert [c["uid"] for c in response.json()["claims"]] == [s.uid for s in on_read]
    member = _member(TEAM)
    history = StoredHistory(cluster)
    mine = member.get("/api/claims", {"cluster": "demo"}, secure=True)
    assert mine.content == _computed(history, Scope(admin=False, namespaces=frozenset({TEAM})))
    everyone = admin_client.get("/api/claims", {"cluster": "demo"}, secure=True).json()["claims"]
    others = {c["namespace"] for c in everyone} - {TEAM}
    assert others and {c["namespace"] for c in mine.json()["claims"]} == {TEAM}


def test_listings_stored_without_entries_are_answered_from_the_decoded_rows(
    demo_history: Any, admin_client: Client
) -> None:
    cluster = Cluster.objects.get(name="demo")
    before = admin_client.get("/api/claims", {"cluster": "demo"}, secure=True).content
    ClaimListing.objects.filter(cluster=cluster).update(entry="")
    assert admin_client.get("/api/claims", {"cluster": "demo"}, secure=True).content == before


@pytest.mark.parametrize("uid", ["0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "a.b_c~d", "with space", 'ü"\\', "?#"])
def test_a_claims_url_encoded_once_per_list_is_its_json(uid: str) -> None:
    # The joined list puts each URL in as claim_url_json gives it: the same text json.dumps makes of it.
    assert claim_url_json("demo")(uid) == json.dumps(claim_url("demo")(uid))
