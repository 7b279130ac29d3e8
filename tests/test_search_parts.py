"""Issue 20 item 2: search by any part of a Pod, claim or namespace name, in scope."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.users import admin_and_alice

pytestmark = pytest.mark.django_db


@pytest.fixture
def clients(demo_history: Any) -> dict[str, Client]:
    clients = admin_and_alice()
    return {"admin": clients["admin"], "member": clients["alice"]}


def landed(client: Client, q: str) -> str:
    response = client.get("/c/demo/search", {"q": q})
    if response.status_code == 302:
        return str(response["Location"])
    assert response.status_code == 200
    return response.content.decode()


def test_a_part_of_a_name_finds_it(clients: dict[str, Client]) -> None:
    for q in ("h100", "ml-training", "report"):
        found = landed(clients["admin"], q)
        assert "No Pod, claim, node or namespace" not in found, q
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
