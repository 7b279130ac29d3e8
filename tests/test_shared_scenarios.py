"""The shared example scenarios' ``explain`` expectations, read in place (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from domain.verdicts.explain import explain
from tests.scenarios import SCENARIOS, expected, load

pytestmark = pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"{SCENARIOS} is absent")

def _explain_cases() -> list[tuple[Path, list[Any]]]:
    if not SCENARIOS.is_dir():
        return []
    cases = []
    for folder in sorted(SCENARIOS.iterdir()):
        if (folder / "expected.json").is_file():
            cases += [(folder, case) for case in expected(folder).get("explain", [])]
    return cases


@pytest.mark.parametrize(
    ("folder", "case"), _explain_cases(), ids=lambda v: v.name if isinstance(v, Path) else str(v[0])
)
def test_scenario_explain(folder: Path, case: list[Any]) -> None:
    pod_ref, boundary, reason, incarnations = case
    namespace, name = pod_ref.split("/", 1)
    out = explain(load(folder), namespace, name)
    verdict = out["verdict"]
    assert (verdict["boundary"], verdict["reason"]) == (boundary, reason), verdict["message"]
    assert len(out["incarnations"]) == incarnations
    assert verdict["message"] and "\n" not in verdict["message"]
