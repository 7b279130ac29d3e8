"""Claim summaries for the claims list and the claims API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from demo import builders as b
from domain.cluster.claim_summaries import claim_summaries
from domain.cluster.state import MemoryHistory

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)


def test_summaries_are_sorted_computed_once_per_state_and_handed_out_as_copies() -> None:
    claims = [
        b.claim("ml", "b", [b.request()], T0, allocated=[("gpu", "gpu-node-0", "gpu-1")]),
        b.claim("ml", "a", [b.request()], T0),
        b.claim("infra", "z", [b.request()], T0),
    ]
    state = MemoryHistory([(T0 + H, claims)]).state
    first = claim_summaries(state)
    assert [(s.namespace, s.name, s.state) for s in first] == [
        ("infra", "z", "pending"), ("ml", "a", "pending"), ("ml", "b", "allocated")
    ]
    first.clear()  # a caller filtering its copy changes nothing for the next
    again = claim_summaries(state)
    assert [s.name for s in again] == ["z", "a", "b"]
    assert again[0] is state.derived["claim_summaries"][0]
