"""Import a cluster built with demo.builders as one snapshot, then ask the CLI about it (as users do)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command

from demo import builders as b

AT = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def import_objects(tmp_path: Path, objects: Iterable[dict[str, Any]], at: datetime = AT) -> None:
    dump = tmp_path / "snapshot.json"
    dump.write_bytes(b.dump_json(objects))
    call_command("import-snapshot", str(dump), "--at", at.isoformat(), stdout=StringIO())


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    call_command(*args, "--json")
    return orjson.loads(capsys.readouterr().out)


def explain_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: Iterable[dict[str, Any]], pod: str
) -> dict[str, Any]:
    """``import-snapshot`` then ``explain POD --json``: the verdict."""
    import_objects(tmp_path, objects)
    verdict: dict[str, Any] = cli_json(capsys, "explain", pod)["verdict"]
    return verdict
