"""../shared/scenarios end to end: import-snapshot each file at its time, then explain/leaks --json over stored history."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from django.core.management import call_command

from tests.scenarios import SCENARIOS

CASES = sorted(p.parent.name for p in SCENARIOS.glob("*/expected.json")) if SCENARIOS.is_dir() else []

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not CASES, reason="../shared/scenarios is not beside this checkout"),
]


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    call_command(*args, "--json")
    return orjson.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", CASES)
def test_scenario(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = SCENARIOS / name
    expected = json.loads((folder / "expected.json").read_text())
    for file, at in expected["snapshots"]:
        call_command("import-snapshot", str(folder / file), "--at", at)
    for pod, boundary, reason, incarnations in expected.get("explain", []):
        doc = cli_json(capsys, "explain", pod)
        assert (doc["verdict"]["boundary"], doc["verdict"]["reason"]) == (boundary, reason), doc["verdict"]["message"]
        assert len(doc["incarnations"]) == incarnations
    if "leaks" in expected:
        leaks = {f"{c['namespace']}/{c['name']}": c for c in cli_json(capsys, "leaks")["claims"]}
        for claim, reason, hours in expected["leaks"].get("flagged", []):
            assert leaks[claim]["reason"] == reason
            assert leaks[claim]["device_hours"] == pytest.approx(hours, rel=0.05)
        for claim in expected["leaks"].get("not_flagged", []):
            assert claim not in leaks
