"""The shared example scenarios (../shared/scenarios), read in place: never copied into the repo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from domain.cluster.state import MemoryHistory
from domain.cluster.timefmt import parse_time

SCENARIOS = Path(__file__).resolve().parents[2] / "shared" / "scenarios"


def expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text())


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
    for name, at in expected(folder)["snapshots"]:
        when = parse_time(at)
        assert when is not None, f"{folder.name}: bad time {at!r}"
        snapshots.append((when, _items(folder / name)))
    return MemoryHistory(snapshots)
