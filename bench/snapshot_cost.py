#!/usr/bin/env python
"""What a collection costs at cluster scale, next to a bare ``json.load`` of the same bytes.

    .venv/bin/python bench/snapshot_cost.py --nodes 2000 5000 [--repeat 3] [--typed-pages 30]

For each size: generate a synthetic cluster (N nodes x 8 GPUs, ~30 pods per node, claims and
events) and the same cluster one generation later with 1% churn, and serve both stages from the
fake API server in its own process (a real API server is another machine; in-process it would
compete with the collector for the GIL). Then, each as a fresh process with its start included:

  - ``python -c 'json.load(...)'`` of the whole List's bytes: the floor any reader pays;
  - ``manage.py collect --once`` (``CLAIMLINE_DERIVE=false``: the collector alone; deriving is
    ``derived_cost.py``'s): first collection (writes everything), then unchanged collections
    interleaved with the json.load runs (medians), then one after the server advances to the
    churned stage;
  - ``manage.py import-snapshot`` of the first stage's List: a first import, then unchanged ones
    30 s apart, also interleaved with json.load runs;
  - the churned collection's versions and deletions are checked against the objects whose
    canonical content actually differs between the two stages (computed from the stage files
    with the collector's own filters and normalizer).

And in this process, the official client's typed path (``list_pod_for_all_namespaces`` into
V1Pod models) against the raw path the collector uses, over the same first ``--typed-pages``
pages of Pods.

Each database is ``claimline_bench_<N>``, recreated. Results print as JSON lines.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (  # noqa: E402
    PYTHON,
    ROOT,
    FakeServerProcess,
    load,
    machine,
    median,
    recreate_database,
    run_child,
    scratch_dir,
    stored_objects,
)

JSON_LOAD = "import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    json.load(f)\n"


def write_stages(nodes: int, scenario: Path) -> int:
    from demo.synthetic import SYNTHETIC_BASE, generation_time, synthetic_list_bytes

    scenario.mkdir(parents=True, exist_ok=True)
    raw = synthetic_list_bytes(nodes)
    (scenario / "0.json").write_bytes(raw)
    size = len(raw)
    del raw
    churned = synthetic_list_bytes(nodes, at=generation_time(SYNTHETIC_BASE, 1), churn=0.01, generation=1)
    (scenario / "1.json").write_bytes(churned)
    return size


def stored_hashes(path: Path) -> dict[tuple[str, str], str]:
    import orjson

    return {n.key: n.content_hash for n in stored_objects(orjson.loads(path.read_bytes())["items"])}


def expected_churn(scenario: Path) -> tuple[int, int]:
    before = stored_hashes(scenario / "0.json")
    gc.collect()
    after = stored_hashes(scenario / "1.json")
    changed = sum(1 for key, digest in after.items() if before.get(key) != digest)
    deleted = sum(1 for key in before if key not in after)
    return changed, deleted


def typed_vs_raw(kubeconfig: Path, pages: int) -> dict[str, float | int]:
    from kubernetes import client as k8s

    from collector.kinds import BY_KIND
    from collector.kube import ClusterReader, api_client_for
    from collector.sources import ClusterSource

    api = api_client_for(ClusterSource("typed", "kubeconfig", str(kubeconfig)))
    core = k8s.CoreV1Api(api)

    def typed() -> int:
        n, token = 0, None
        for _ in range(pages):
            page = core.list_pod_for_all_namespaces(limit=500, _continue=token)
            n += len(page.items)
            token = page.metadata._continue if page.metadata is not None else None
            if not token:
                break
        return n

    def raw() -> int:
        n = 0
        reader = ClusterReader(api, page_size=500, timeout=300)
        for i, page in enumerate(reader.pages(BY_KIND["Pod"])):
            n += len(page or ())
            if i + 1 >= pages:
                break
        return n

    start = time.process_time()
    typed_n = typed()
    typed_s = time.process_time() - start
    gc.collect()
    start = time.process_time()
    raw_n = raw()
    raw_s = time.process_time() - start
    return {
        "typed_pods": typed_n,
        "raw_pods": raw_n,
        "typed_pods_cpu_s": round(typed_s, 2),
        "raw_pods_cpu_s": round(raw_s, 2),
        "typed_vs_raw": round(typed_s / raw_s, 1),
    }


def parse_collect(stdout: str) -> dict[str, int]:
    # "<cluster>: ok at …: N objects, V versions written, D deletions"
    words = stdout.replace(",", "").split()
    try:
        return {
            "objects": int(words[words.index("objects") - 1]),
            "versions": int(words[words.index("versions") - 1]),
            "deletions": int(words[words.index("deletions") - 1]),
        }
    except (ValueError, IndexError):
        raise RuntimeError(f"unexpected collect output: {stdout!r}") from None


def import_runs(dump: Path, env: dict[str, str], repeat: int, tree: Path, loads: list[Any]) -> dict[str, Any]:
    """``manage.py import-snapshot`` of the same List into a cluster of its own: the first import, then
    ``repeat`` unchanged ones 30 s apart (each as a fresh process, its start included, as collections
    are timed), each followed by one more ``json.load`` run of the same bytes."""
    base = "2026-11-20T00:00:00Z"

    def command(i: int) -> list[str]:
        at = f"2026-11-20T00:{i // 2:02d}:{30 * (i % 2):02d}Z" if i else base
        return [PYTHON, "manage.py", "import-snapshot", str(dump), "--cluster", "imported", "--at", at]

    first = run_child(command(0), env, tree)
    if first.returncode:
        raise RuntimeError(first.stderr)
    unchanged = []
    for i in range(1, repeat + 1):
        unchanged.append(run_child(command(i), env, tree))
        loads.append(run_child([PYTHON, "-c", JSON_LOAD, str(dump)]))
    for r in unchanged:
        if r.returncode or " 0 versions written, 0 deletions" not in r.stdout:
            raise RuntimeError(f"unchanged import wrote something: {r.stdout} {r.stderr[-2000:]}")
    load_s = median([r.wall_s for r in loads])
    return {
        "import_first_s": round(first.wall_s, 1),
        "import_unchanged_process_s": [round(r.wall_s, 2) for r in unchanged],
        "import_unchanged_vs_json_load": round(median([r.wall_s for r in unchanged]) / load_s, 2),
        "import_peak_rss_mb": round(max(r.max_rss_mb for r in [first, *unchanged])),
    }


def run(nodes: int, repeat: int, typed_pages: int, keep: bool, tree: Path) -> dict[str, Any]:
    work = scratch_dir(f"snapshot-cost-{nodes}-")
    scenario, kubeconfig = work / "scenario", work / "kubeconfig"
    start = time.perf_counter()
    list_bytes = write_stages(nodes, scenario)
    generate_s = time.perf_counter() - start
    db = recreate_database(f"claimline_bench_{nodes}")
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
        "CLAIMLINE_CLUSTERS": f"bench-{nodes}=kubeconfig:{kubeconfig}",
        "CLAIMLINE_VAR_DIR": str(ROOT / "var" / "bench"),
        "CLAIMLINE_REQUEST_TIMEOUT": "300",
    }
    migrate = run_child([PYTHON, "manage.py", "migrate", "-v0"], env)
    if migrate.returncode:
        raise RuntimeError(migrate.stderr)
    server = FakeServerProcess(scenario, kubeconfig)
    collect = [PYTHON, "manage.py", "collect", "--once"]
    # The collector's own cost: with the embedded scheduler a collection would also derive the snapshot
    # and render /metrics and the review inline, which derived_cost.py measures (under Celery each is a
    # task of its own). Imports keep deriving: an unchanged one derives nothing.
    collect_env = {**env, "CLAIMLINE_DERIVE": "false"}
    try:
        server.start()
        server.warm()
        first = run_child(collect, collect_env, tree)
        if first.returncode:
            raise RuntimeError(first.stderr)
        loads, unchanged = [], []
        for _ in range(repeat):
            loads.append(run_child([PYTHON, "-c", JSON_LOAD, str(scenario / "0.json")]))
            unchanged.append(run_child(collect, collect_env, tree))
        for r in unchanged:
            if r.returncode or parse_collect(r.stdout)["versions"] or parse_collect(r.stdout)["deletions"]:
                raise RuntimeError(f"unchanged collection wrote something: {r.stdout} {r.stderr[-2000:]}")
        server.control("/_fake/advance")
        server.warm()
        churned = run_child(collect, collect_env, tree)
        if churned.returncode:
            raise RuntimeError(churned.stderr)
        typed = typed_vs_raw(kubeconfig, typed_pages)
    finally:
        server.stop()
    imports = import_runs(scenario / "0.json", env, repeat, tree, loads)
    changed, deleted = expected_churn(scenario)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    first_counts, churn_counts = parse_collect(first.stdout), parse_collect(churned.stdout)
    load_s = median([r.wall_s for r in loads])
    unchanged_s = median([r.wall_s for r in unchanged])
    return {
        "nodes": nodes,
        "tree": str(tree),
        "objects_stored": first_counts["objects"],
        "list_bytes_mb": round(list_bytes / 1e6, 1),
        "generate_s": round(generate_s, 1),
        "json_load_process_s": [round(r.wall_s, 2) for r in loads],
        "collect_unchanged_process_s": [round(r.wall_s, 2) for r in unchanged],
        "unchanged_vs_json_load": round(unchanged_s / load_s, 2),
        "json_load_cpu_s": round(median([r.cpu_s for r in loads]), 2),
        "collect_unchanged_cpu_s": round(median([r.cpu_s for r in unchanged]), 2),
        "unchanged_vs_json_load_cpu": round(
            median([r.cpu_s for r in unchanged]) / median([r.cpu_s for r in loads]), 2
        ),
        "unchanged_versions": 0,
        "first_collect_s": round(first.wall_s, 1),
        "first_versions": first_counts["versions"],
        "churn_collect_s": round(churned.wall_s, 2),
        "churn_versions": churn_counts["versions"],
        "churn_deletions": churn_counts["deletions"],
        "churn_expected_versions": changed,
        "churn_expected_deletions": deleted,
        "json_load_peak_rss_mb": round(max(r.max_rss_mb for r in loads)),
        "collect_peak_rss_mb": round(max(r.max_rss_mb for r in [first, *unchanged, churned])),
        **typed,
        **imports,
        "load_after": load(),
    }


def main() -> None:
    # Stopped (the smoke test stops the scripts it did not wait for): stop the fake API server too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2000])
    parser.add_argument("--repeat", type=int, default=3, help="unchanged collections and json.load runs (medians)")
    parser.add_argument("--typed-pages", type=int, default=30, help="pages of 500 Pods for typed vs raw")
    parser.add_argument("--keep", action="store_true", help="keep the generated stage files")
    parser.add_argument(
        "--tree", type=Path, default=ROOT,
        help="run the collector from this checkout (e.g. an exported older commit) to compare before/after",
    )
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "load_before": load()}), flush=True)
    for n in args.nodes:
        print(json.dumps(run(n, args.repeat, args.typed_pages, args.keep, args.tree.resolve())), flush=True)


if __name__ == "__main__":
    main()
