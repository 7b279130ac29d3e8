"""Small clusters for collector and history tests, built with demo.builders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command

from demo import builders as b

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def small_cluster(at: datetime = T0, pods: int = 3) -> list[dict[str, Any]]:
    """Two GPU nodes, a DeviceClass, and ``pods`` Pods each holding one allocated GPU."""
    created = at - timedelta(days=30)
    objects: list[dict[str, Any]] = [
        b.device_class(created=created),
        b.namespace("team-a", created=created),
        b.node("worker-0", created=created, heartbeat=at),
        b.node("worker-1", created=created, heartbeat=at),
        b.resource_slice("worker-0", b.gpu_devices("worker-0", 4), created=created),
        b.resource_slice("worker-1", b.gpu_devices("worker-1", 4), created=created),
    ]
    for i in range(pods):
        started = at - timedelta(hours=2)
        p = b.pod(
            "team-a", f"train-{i}", started, claims=[("gpu", {"claim": f"train-{i}-gpu"})],
            node_name=f"worker-{i % 2}", phase="Running",
            conditions=b.running_conditions(started, started + timedelta(minutes=1)),
            container_state=b.state_running(started + timedelta(minutes=1)),
        )
        c = b.claim(
            "team-a", f"train-{i}-gpu", [b.request()], started,
            allocated=[("gpu", f"worker-{i % 2}", f"gpu-{i // 2}")], allocated_at=started,
            reserved_for=[p],
        )
        objects += [p, c, b.event(p, "Started", "Started container main", started, type="Normal")]
    # A Pod without claims: the collector must leave it out.
    objects.append(b.pod("team-a", "web", created, claims=[], node_name="worker-0", phase="Running"))
    return objects


def cli_json_over(
    tmp_path: Path, objects: list[dict[str, Any]], at: datetime, capsys: pytest.CaptureFixture[str], *command: str
) -> Any:
    """``import-snapshot`` of a dump of ``objects`` taken at ``at``, then ``command --json``'s parsed output."""
    dump = tmp_path / "dump.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat())
    capsys.readouterr()
    call_command(*command, "--json")
    return orjson.loads(capsys.readouterr().out)

