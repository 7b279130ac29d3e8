"""The shared example scenarios' ``leaks`` expectations, read in place (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.reports.leaks import find_leaks
from tests.scenarios import SCENARIOS, expected, load


def _scenarios() -> list[Path]:
    if not SCENARIOS.is_dir():
        return []
    return sorted(d for d in SCENARIOS.iterdir() if (d / "expected.json").is_file() and "leaks" in expected(d))


pytestmark = pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"{SCENARIOS} is absent")


@pytest.mark.parametrize("folder", _scenarios(), ids=lambda p: p.name)
def test_scenario_leaks(folder: Path) -> None:
    wanted = expected(folder)["leaks"]
    report = find_leaks(load(folder))
    by_name = {f"{c['namespace']}/{c['name']}": c for c in report["claims"]}
    for name, reason, hours in wanted.get("flagged", []):
        assert name in by_name, f"{folder.name}: {name} not flagged; got {sorted(by_name)}"
        assert by_name[name]["reason"] == reason
        assert by_name[name]["device_hours"] == pytest.approx(hours, rel=0.05)
    for name in wanted.get("not_flagged", []):
        assert name not in by_name, f"{folder.name}: {name} flagged as {by_name[name]['reason']}"
