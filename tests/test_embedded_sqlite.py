"""The embedded default (README's first command: SQLite) derives what the PostgreSQL deployment derives.

The rest of the suite runs on PostgreSQL; a query only PostgreSQL answers (``DISTINCT ON``) once stopped
every derivation of the demo on SQLite, logged and skipped while the pages read the history on read.
Here the demo story's snapshots are imported into a SQLite database by a separate process, as
``scripts/demo`` stores them, and every one must be derived, its allocation spans written with their
Pods' workloads (the query that failed) and match-devices answered from the layer's rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from demo import builders as b
from demo.story import demo_snapshots

ROOT = Path(__file__).resolve().parents[1]
CHECK = """
import django, json
django.setup()
from collector.history_reader import StoredHistory
from collector.models import Cluster, Snapshot
from derived.match_stock import stored_stock
from derived.models import AllocationSpan, PodExplanation
from derived.writer import covered
cluster = Cluster.objects.get()
snapshots = list(Snapshot.objects.filter(cluster=cluster).order_by("at"))
stock = stored_stock(StoredHistory(cluster, snapshots[-1].at))
print(json.dumps({
    "snapshots": len(snapshots),
    "derived": sum(covered(s.pk) for s in snapshots),
    "explained": PodExplanation.objects.count(),
    "workloads": sorted({w for w in AllocationSpan.objects.values_list("workload", flat=True) if w}),
    "devices from rows": len(stock.devices) if stock is not None else None,
}))
"""


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


def test_the_demo_story_is_derived_on_sqlite(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'embedded.sqlite3'}",
        "CLAIMLINE_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
    }
    _manage(env, "migrate", "--no-input")
    snapshots = demo_snapshots(datetime(2026, 11, 20, 9, 0, tzinfo=UTC))
    for i, (at, objects) in enumerate(snapshots):
        dump = tmp_path / f"snapshot-{i}.json"
        dump.write_bytes(b.dump_json(objects))
        _manage(env, "import-snapshot", str(dump), "--at", at.isoformat())
    check = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    found = json.loads(check.stdout.strip().splitlines()[-1])
    assert found["snapshots"] == found["derived"] == len(snapshots), found
    assert found["explained"] > 0 and found["workloads"], found
    assert found["devices from rows"], found
