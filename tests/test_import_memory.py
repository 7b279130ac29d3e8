"""import-snapshot's memory follows what it keeps, not the dump (issue 19, item 11).

The dump is streamed: a List's items one at a time, each kept object normalized and written a batch at a
time, Pods that use no claim and Events about nothing kept waiting compressed until the dump is known
whole. Python's own allocations (``tracemalloc``) during the command are measured against the file's
size; ``bench/import_memory.py`` measures the process's resident memory at scale.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from collector.models import ObjectVersion
from demo import builders as b
from tests.clusters import T0

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def import_only(settings: Any, tmp_path: Path) -> None:
    """The import alone: its derivation (done after it, pages derive on read otherwise) is not measured, and
    neither is loading the code an import runs (a first small import has)."""
    settings.CLAIMLINE_DERIVE = False
    warm = tmp_path / "warm.json"
    pods_dump(warm, 2)
    call_command("import-snapshot", str(warm), "--at", T0.isoformat(), "--cluster", "warm", stdout=StringIO())


def peak_while(run: Callable[[], Any]) -> int:
    """The peak of Python's allocations while ``run`` runs, in bytes."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def import_dump(dump: Path, hours: int = 0) -> None:
    call_command("import-snapshot", str(dump), "--at", (T0 + timedelta(hours=hours)).isoformat(), stdout=StringIO())


def pods_dump(path: Path, pods: int) -> dict[str, Any]:
    """kubectl's List (indented, kind after the items) of Pods that use no claim, among them a Pod using a claim,
    one only a claim listed after it reserves and an Event about that one, listed before it."""
    user = b.pod("team-a", "user", T0, claims=[("gpu", {"claim": "gpu"})], node_name="worker-0", phase="Running")
    reserved = b.pod("team-a", "reserved", T0, claims=[], node_name="worker-0", phase="Running")
    claim = b.claim("team-a", "gpu", [b.request()], T0, allocated=[("gpu", "worker-0", "gpu-0")], allocated_at=T0,
                    reserved_for=[user, reserved])
    plain = [b.pod("team-a", f"web-{i:06d}", T0, claims=[], node_name="worker-0", phase="Running") for i in range(pods)]
    items = [b.event(reserved, "Started", "Started container main", T0, type="Normal"), reserved, *plain[: pods // 2],
             b.device_class(), user, *plain[pods // 2 :], claim]
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {}},
                                  option=orjson.OPT_INDENT_2))
    return {"user": user, "reserved": reserved, "claim": claim, "plain": plain}


def test_pods_that_use_no_claim_cost_little_more_than_nothing(tmp_path: Path, admin_client: Client) -> None:
    dump = tmp_path / "pods.json"
    made = pods_dump(dump, 1500)
    size = dump.stat().st_size
    peak = peak_while(lambda: import_dump(dump))
    # The whole dump parsed at once took ~8x its size; streamed, what waits is compressed.
    assert peak < size, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB dump"
    stored = set(ObjectVersion.objects.filter(cluster__name="demo").values_list("kind", "name"))
    assert ("Pod", "user") in stored and ("Pod", "reserved") in stored and ("ResourceClaim", "gpu") in stored
    assert sum(kind == "Event" for kind, _name in stored) == 1
    assert not any(name.startswith("web-") for _kind, name in stored)
    assert admin_client.get("/c/demo/pods/team-a/reserved/").status_code == 200
    assert admin_client.get("/c/demo/pods/team-a/web-000007/").status_code == 404
    assert admin_client.get("/api/explain", {"pod": "team-a/user"}).json()["pod"]["uid"] == made["user"]["metadata"]["uid"]


def test_many_tiny_objects_cost_a_small_multiple_of_their_bytes(tmp_path: Path, admin_client: Client) -> None:
    count = 20_000
    dump = tmp_path / "namespaces.json"
    items = b",".join(b'{"metadata":{"name":"ns-%07d","uid":"%07d"}}' % (i, i) for i in range(count))
    dump.write_bytes(b'{"apiVersion":"v1","kind":"NamespaceList","items":[' + items + b"]}")
    size = dump.stat().st_size
    peak = peak_while(lambda: import_dump(dump))
    # Every Namespace parsed, normalized and held at once took ~100x the dump; now: the UIDs seen and a batch.
    assert peak < 12 * size, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB dump"
    assert ObjectVersion.objects.filter(cluster__name="demo", kind="Namespace").count() == count
    # Written in batches, still one snapshot: a second import of the same dump writes nothing.
    import_dump(dump, hours=1)
    runs = admin_client.get("/api/snapshots").json()["snapshots"]
    assert [(r["objects_seen"], r["versions_written"], r["deletions"]) for r in runs][:2] == [
        (count, 0, 0), (count, count, 0)
    ]
