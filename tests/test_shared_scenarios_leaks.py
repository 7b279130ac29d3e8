"""The shared example scenarios' ``leaks`` expectations, read in place (never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dashboard.domain.leaks import find_leaks
from dashboard.domain.state import MemoryHistory
from dashboard.domain.timefmt import parse_time

SCENARIOS = Path(__file__).resolve().parents[2] / "shared" / "scenarios"


def _scenarios() -> list[Path]:
    if not SCENARIOS.is_dir():
        return []
    return sorted(d for d in SCENARIOS.iterdir() if (d / "expected.json").is_file() and "leaks" in _expected(d))


def _expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text())


def _items(path: Path) -> list[dict[str, Any]]:
    """Items of a ``List`` (or ``PodList``…, whose items lack ``kind``), or a single object."""
    doc = json.loads(path.read_text())
    list_kind = str(doc.get("kind") or "")
    if not list_kind.endswith("List"):
        return [doc]
    item_kind = list_kind[: -len("List")]
    return [item if "kind" in item or not item_kind else {**item, "kind": item_kind} for item in doc["items"]]


def load(folder: Path) -> MemoryHistory:
    snapshots = []
    for name, at in _expected(folder)["snapshots"]:
        when = parse_time(at)
        assert when is not None, f"{folder.name}: bad time {at!r}"
        snapshots.append((when, _items(folder / name)))
    return MemoryHistory(snapshots)


pytestmark = pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"{SCENARIOS} is absent")


@pytest.mark.parametrize("folder", _scenarios(), ids=lambda p: p.name)
def test_scenario_leaks(folder: Path) -> None:
    expected = _expected(folder)["leaks"]
    report = find_leaks(load(folder))
    by_name = {f"{c['namespace']}/{c['name']}": c for c in report["claims"]}
    for name, reason, hours in expected.get("flagged", []):
        assert name in by_name, f"{folder.name}: {name} not flagged; got {sorted(by_name)}"
        assert by_name[name]["reason"] == reason
        assert by_name[name]["device_hours"] == pytest.approx(hours, rel=0.05)
    for name in expected.get("not_flagged", []):
        assert name not in by_name, f"{folder.name}: {name} flagged as {by_name[name]['reason']}"
