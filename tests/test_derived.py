"""The derived layer: written by import-snapshot, equal to what the domain derives on read."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from derived.models import DerivedSnapshot, PodExplanation
from tests.derived_checks import assert_layer_matches_derivation
from tests.scenarios import SCENARIOS

pytestmark = pytest.mark.django_db

CASES = sorted(p.parent.name for p in SCENARIOS.glob("*/expected.json")) if SCENARIOS.is_dir() else []


def test_demo_story_reads_the_same_from_the_layer(demo_history: Any) -> None:
    assert DerivedSnapshot.objects.count() == 5
    assert assert_layer_matches_derivation("demo") > 0


@pytest.mark.skipif(not CASES, reason="../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("name", CASES)
def test_shared_scenario_reads_the_same_from_the_layer(name: str) -> None:
    import json

    folder = SCENARIOS / name
    for file, at in json.loads((folder / "expected.json").read_text())["snapshots"]:
        call_command("import-snapshot", str(folder / file), "--at", at)
    assert assert_layer_matches_derivation("demo") > 0
    assert PodExplanation.objects.exists()
