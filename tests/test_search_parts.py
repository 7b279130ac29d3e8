"""Issue 20 item 2: search by any part of a Pod, claim or namespace name, in scope."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from access.models import NamespaceGrant

pytestmark = pytest.mark.django_db


def login(username: str, groups: list[str]) -> Client:
    user = User.objects.create_user(username, password="pw")
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    NamespaceGrant.objects.create(group=Group.objects.create(name="ml-training"), namespace="ml-training")
    return {"admin": login("admin", ["platform-admins"]), "member": login("member", ["ml-training"])}


def landed(client: Client, q: str) -> str:
    response = client.get("/c/demo/search", {"q": q})
    if response.status_code == 302:
        return str(response["Location"])
    assert response.status_code == 200
    return response.content.decode()


def test_a_part_of_a_name_finds_it(clients: dict[str, Client]) -> None:
    for q in ("h100", "ml-training", "report"):
        found = landed(clients["admin"], q)
        assert "No Pod or claim" not in found, q
    assert landed(clients["admin"], "report-g").startswith("/c/demo/claims/")  # the one claim
    assert "ml-training/" in landed(clients["admin"], "ml-training")


def test_exact_names_still_land_on_the_pod(clients: dict[str, Client]) -> None:
    assert landed(clients["admin"], "llm-finetune") == "/c/demo/pods/research/llm-finetune/"


def test_search_stays_in_scope(clients: dict[str, Client]) -> None:
    member = clients["member"]
    for q in ("report", "llm", "research", "batch"):
        found = landed(member, q)
        assert "report-gpu" not in found and "llm-finetune" not in found and "research/" not in found, q
    assert "ml-training/" in landed(member, "training")
