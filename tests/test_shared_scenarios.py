"""The shared example scenarios' ``explain`` expectations, read in place (never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboard.domain.state import MemoryHistory
from dashboard.domain.timefmt import parse_time
from dashboard.domain.verdicts import explain

SCENARIOS = Path(__file__).resolve().parents[2] / "shared" / "scenarios"

pytestmark = pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"{SCENARIOS} is absent")


def _expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text())


def _explain_cases() -> list[tuple[Path, list[Any]]]:
    if not SCENARIOS.is_dir():
        return []
    cases = []
    for folder in sorted(SCENARIOS.iterdir()):
        if (folder / "expected.json").is_file():
            cases += [(folder, case) for case in _expected(folder).get("explain", [])]
    return cases


def _documents(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    if path.suffix == ".json":
        return [json.loads(text)]
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def _items(path: Path) -> list[dict[str, Any]]:
    """Objects of a ``List`` (items of a typed list such as ``PodList`` get their kind back)."""
    out = []
    for doc in _documents(path):
        list_kind = str(doc.get("kind") or "")
        if not list_kind.endswith("List"):
            out.append(doc)
            continue
        item_kind = list_kind[: -len("List")]
        out += [item if "kind" in item or not item_kind else {**item, "kind": item_kind} for item in doc["items"]]
    return out


def load(folder: Path) -> MemoryHistory:
    snapshots = []
    for name, at in _expected(folder)["snapshots"]:
        when = parse_time(at)
        assert when is not None, f"{folder.name}: bad time {at!r}"
        snapshots.append((when, _items(folder / name)))
    return MemoryHistory(snapshots)


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
