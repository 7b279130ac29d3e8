"""The derivation's version moves exactly when what it writes moves.

``derived.models.DOMAIN_VERSION`` marks stored rows: rows of another version are stale and pages
derive on read until they are written again. So the version must change with every change of the
derived output (else stale rows pass for current) and only then (else an upgrade makes every
cluster rebuild for nothing). This test derives the demo story and the shared scenarios through
``import-snapshot``, digests every row the derived layer stored, and compares the digest with the one
recorded beside the version in ``tests/fixtures/derivation_digest.json``:

- same version, other digest: the output changed without a bump — bump ``DOMAIN_VERSION``;
- other version, same digest: a bump with unchanged output — take it back.

After a bump, ``CLAIMLINE_RECORD_DERIVATION=1 scripts/test tests/test_derivation_version.py`` records
the new digest (the file says which version it belongs to, so a stale record cannot pass).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import models

from collector.models import Cluster, Snapshot
from demo.story import demo_stages, stage_times
from derived.documents import unpack
from derived.models import DOMAIN_VERSION, DocumentDictionary, PodExplanation
from tests.scenarios import SCENARIOS

pytestmark = pytest.mark.django_db

RECORD = Path(__file__).parent / "fixtures" / "derivation_digest.json"
BASE = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# Recomputed from other fields or tied to this database's keys, not part of what is derived.
SKIPPED_FIELDS = {"version", "dictionary", "subject"}


def _import(tmp_path: Path, cluster: str, name: str, items: list[dict[str, Any]], at: datetime | str) -> None:
    dump = tmp_path / f"{cluster}-{name}.json"
    dump.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    when = at if isinstance(at, str) else at.isoformat()
    call_command("import-snapshot", str(dump), "--at", when, "--cluster", cluster, stdout=StringIO())


def _derive_everything(tmp_path: Path) -> None:
    for i, (stage, at) in enumerate(zip(demo_stages(BASE), stage_times(BASE), strict=True)):
        _import(tmp_path, "demo", f"stage-{i}", stage, at)
    if SCENARIOS.is_dir():
        for expected in sorted(SCENARIOS.glob("*/expected.json")):
            folder = expected.parent
            cluster = folder.name[:40].rstrip("-")
            for file, at in json.loads(expected.read_text())["snapshots"]:
                call_command(
                    "import-snapshot", str(folder / file), "--at", at, "--cluster", cluster,
                    stdout=StringIO(),
                )


def row_value(row: models.Model, field: models.Field) -> Any:
    """A derived row's field as comparable JSON: a snapshot by its time, a document unpacked."""
    if isinstance(field, models.ForeignKey | models.OneToOneField):
        target = getattr(row, field.name)
        if isinstance(target, Snapshot):
            return target.at.isoformat()
        if isinstance(target, Cluster):
            return target.name
        return None
    value = getattr(row, field.attname)
    if isinstance(row, PodExplanation) and field.name == "content":
        return unpack(value, row.dictionary_id)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def derived_rows() -> dict[str, list[bytes]]:
    """Every row of the derived layer, each as canonical JSON, sorted within its table."""
    out = {}
    for model in apps.get_app_config("derived").get_models():
        if model is DocumentDictionary:  # trained from the documents: how they are packed, not what they say
            continue
        fields = [
            f for f in model._meta.concrete_fields
            if f.name not in SKIPPED_FIELDS and not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
        ]
        rows = [
            orjson.dumps({f.name: row_value(row, f) for f in fields}, option=orjson.OPT_SORT_KEYS)
            for row in model.objects.select_related().all()
        ]
        out[model.__name__] = sorted(rows)
    return out


def digest_of(rows: dict[str, list[bytes]]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(rows):
        digest.update(name.encode() + b"\0")
        for row in rows[name]:
            digest.update(row + b"\n")
    return digest.hexdigest()


def test_derivation_version_moves_with_the_derived_output(tmp_path: Path) -> None:
    _derive_everything(tmp_path)
    rows = derived_rows()
    assert sum(map(len, rows.values())) > 100, "the story and scenarios derived next to nothing"
    digest = digest_of(rows)
    counts = {name: len(r) for name, r in sorted(rows.items())}
    if os.environ.get("CLAIMLINE_RECORD_DERIVATION") == "1":
        RECORD.write_text(json.dumps({"version": DOMAIN_VERSION, "digest": digest, "rows": counts}, indent=2) + "\n")
    recorded = json.loads(RECORD.read_text())
    if recorded["version"] == DOMAIN_VERSION:
        assert digest == recorded["digest"], (
            f"the derived output changed (rows now {counts}, recorded {recorded['rows']}) but DOMAIN_VERSION is still "
            f"{DOMAIN_VERSION!r}: bump it in derived/models.py, then record the digest "
            "(CLAIMLINE_RECORD_DERIVATION=1 scripts/test tests/test_derivation_version.py)"
        )
    else:
        assert digest != recorded["digest"], (
            f"DOMAIN_VERSION moved from {recorded['version']!r} to {DOMAIN_VERSION!r} but the derived output did not: "
            "take the bump back (stored rows would go stale for nothing)"
        )
        pytest.fail(
            f"DOMAIN_VERSION is {DOMAIN_VERSION!r} but the recorded digest belongs to {recorded['version']!r}: record it "
            "(CLAIMLINE_RECORD_DERIVATION=1 scripts/test tests/test_derivation_version.py)"
        )
