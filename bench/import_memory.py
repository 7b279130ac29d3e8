#!/usr/bin/env python
"""Peak memory of ``import-snapshot`` against the size of the dump it reads.

    .venv/bin/python bench/import_memory.py --namespaces-mb 48 --pods-mb 200
    .venv/bin/python bench/import_memory.py --namespaces-mb 48 --pods-mb 200 --tree DIR   # another checkout's

Generates two dumps under var/bench/ (removed afterwards), each imported by a fresh
``manage.py import-snapshot`` process into a database of its own (``claimline_bench_import_memory``,
recreated), whose peak resident memory (its rusage) is printed beside the dump's size:

  - ``namespaces``: a ``NamespaceList`` of tiny Namespaces (~50 bytes each, ~1M in 48 MB), every one stored;
  - ``pods``: a ``List`` as ``kubectl get deviceclasses,resourceclaims,pods -A -o json`` prints it (indented),
    of one DeviceClass, one claim and Pods that use no claim, none of which is stored (as a collection).

The import runs with ``CLAIMLINE_DERIVE=false``, and its derivation (what the command does next by
default) as ``rebuild-derived`` in a process of its own, so each has its own peak. And the same import
of a dump of one Namespace: the process's own floor (Python, Django, the client). A JSON line per
dump: ``input_mb``, ``peak_rss_mb`` (the import), ``rss_vs_input``, ``over_floor_vs_input`` (peak less
the floor, over the input) and ``derive_peak_rss_mb``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import PYTHON, ROOT, load, machine, recreate_database, run_child, scratch_dir  # noqa: E402

MB = 1_000_000
AT = "2026-11-20T12:00:00Z"


def namespaces_dump(path: Path, size_mb: float) -> int:
    """A NamespaceList of tiny Namespaces filling ``size_mb``; the number of Namespaces."""
    budget = int(size_mb * MB)
    count = 0
    with path.open("wb") as out:
        out.write(b'{"apiVersion":"v1","kind":"NamespaceList","items":[')
        written = 0
        while written < budget:
            item = b'{"metadata":{"name":"ns-%07d","uid":"%07d"}}' % (count, count)
            out.write(item if count == 0 else b"," + item)
            written += len(item) + 1
            count += 1
        out.write(b"]}\n")
    return count


def pods_dump(path: Path, size_mb: float) -> int:
    """An indented List of a DeviceClass, a claim and Pods using no claim, filling ``size_mb``; the Pods."""
    import orjson

    from demo import builders as b
    from tests.clusters import T0

    head = [b.device_class(), b.claim("team-a", "gpu", [b.request()], T0)]
    template = b.pod(
        "team-a", "web-00000000", T0, claims=[], node_name="worker-0", phase="Running",
        conditions=b.running_conditions(T0, T0), container_state=b.state_running(T0),
    )
    uid = template["metadata"]["uid"].encode()
    body = orjson.dumps(template, option=orjson.OPT_INDENT_2)
    indented = b"\n".join(b"    " + line for line in body.splitlines())
    budget = int(size_mb * MB)
    count = 0
    with path.open("wb") as out:
        out.write(b'{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [\n')
        out.write(b",\n".join(orjson.dumps(o, option=orjson.OPT_INDENT_2) for o in head))
        written = 0
        while written < budget:
            pod = indented.replace(b"web-00000000", b"web-%08d" % count).replace(uid, b"%036d" % count)
            out.write(b",\n" + pod)
            written += len(pod) + 2
            count += 1
        out.write(b'\n  ],\n  "metadata": {"resourceVersion": ""}\n}\n')
    return count


def import_once(dump: Path, tree: Path, database: str) -> dict[str, Any]:
    """``import-snapshot`` of ``dump`` into a new database, without deriving (the import itself), then
    ``rebuild-derived`` (its derivation, which the command runs after the import unless
    ``CLAIMLINE_DERIVE=false``), each a fresh process: their peak resident memory and time."""
    env = {
        **os.environ,
        "DATABASE_URL": recreate_database(database),
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
        "CLAIMLINE_CLUSTERS": "bench=in-cluster",
        "CLAIMLINE_VAR_DIR": str(ROOT / "var" / "bench"),
    }
    migrate = run_child([PYTHON, "manage.py", "migrate", "-v0"], env, tree)
    if migrate.returncode:
        raise RuntimeError(migrate.stderr)
    command = [PYTHON, "manage.py", "import-snapshot", str(dump), "--at", AT]
    run = run_child(command, {**env, "CLAIMLINE_DERIVE": "false"}, tree)
    if run.returncode:
        raise RuntimeError(f"import-snapshot of {dump.name} failed: {run.stderr[-3000:]}")
    derive = run_child([PYTHON, "manage.py", "rebuild-derived"], env, tree)
    if derive.returncode:
        raise RuntimeError(f"rebuild-derived after {dump.name} failed: {derive.stderr[-3000:]}")
    return {"peak_rss_mb": round(run.max_rss_mb), "wall_s": round(run.wall_s, 1), "output": run.stdout.strip(),
            "derive_peak_rss_mb": round(derive.max_rss_mb), "derive_wall_s": round(derive.wall_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespaces-mb", type=float, default=2.0, help="size of the Namespaces dump")
    parser.add_argument("--pods-mb", type=float, default=2.0, help="size of the Pods dump")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose manage.py imports")
    args = parser.parse_args()
    tree = args.tree.resolve()
    work = scratch_dir("import-memory-")
    database = "claimline_bench_import_memory" + ("" if tree == ROOT else "_tree")
    try:
        floor_dump = work / "floor.json"
        namespaces_dump(floor_dump, 0)
        floor = import_once(floor_dump, tree, database)["peak_rss_mb"]
        print(json.dumps({"machine": machine(), "tree": str(tree), "floor_rss_mb": floor}), flush=True)
        for name, generate, size in (("namespaces", namespaces_dump, args.namespaces_mb),
                                     ("pods", pods_dump, args.pods_mb)):
            dump = work / f"{name}.json"
            objects = generate(dump, size)
            input_mb = dump.stat().st_size / MB
            result = import_once(dump, tree, database)
            dump.unlink()
            print(json.dumps({
                "dump": name,
                "objects": objects,
                "input_mb": round(input_mb, 1),
                **result,
                "rss_vs_input": round(result["peak_rss_mb"] / input_mb, 1),
                "over_floor_vs_input": round((result["peak_rss_mb"] - floor) / input_mb, 1),
                "load": load(),
            }), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
