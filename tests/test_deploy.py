"""The in-cluster manifests grant exactly what the collector reads, read-only."""

from __future__ import annotations

from pathlib import Path

import yaml

from collector.kinds import RESOURCE_TYPES

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_role_is_read_only_and_exact() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource)
                granted.add((group, resource))
    assert ("", "secrets") not in granted
    assert granted == {(rt.group, rt.plural) for rt in RESOURCE_TYPES}
