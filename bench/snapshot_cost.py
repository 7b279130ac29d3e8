#!/usr/bin/env python
"""What a collection costs at cluster scale, next to a bare JSON parse of the same bytes.

    .venv/bin/python bench/snapshot_cost.py --nodes 500 2000 [--database-url postgres://…/claimline_bench]

For each size: generate a synthetic cluster (N nodes × 8 GPUs, ~30 pods per node,
claims and events), serve it from the fake API server, and time
  - json.loads of the whole List's bytes (the floor: what any reader must pay),
  - the collector's read (HTTP paging through the official client + parse + normalize + hash),
  - the typed client path for Pods (deserializing into V1Pod models) vs. a raw parse of the same pages,
  - writing the first snapshot, an unchanged snapshot, and one with 1% churn.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("CLAIMLINE_VAR_DIR", str(ROOT / "var" / "bench"))
    if database_url.startswith("postgres"):
        import psycopg

        base, _, name = database_url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    gc.collect()
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def run(nodes: int, tmp: Path) -> dict[str, float | int]:
    from kubernetes import client as k8s

    from collector.fake_apiserver import FakeApiServer, FakeCluster
    from collector.history import get_cluster, start_snapshot, write_snapshot
    from collector.kube import ClusterReader, api_client_for
    from collector.models import Cluster
    from dashboard.config import ClusterSource
    from demo.synthetic import SYNTHETIC_BASE, generation_time, synthetic_cluster, synthetic_list_bytes

    Cluster.objects.filter(name=f"bench-{nodes}").delete()
    gen0, gen_t = timed(synthetic_cluster, nodes)
    t1 = generation_time(SYNTHETIC_BASE, 1)
    gen1 = synthetic_cluster(nodes, at=t1, churn=0.01, generation=1)
    raw = synthetic_list_bytes(nodes)
    _, parse_t = timed(json.loads, raw)
    import orjson

    _, orjson_t = timed(orjson.loads, raw)

    server = FakeApiServer(FakeCluster([gen0, gen1]))
    server.start()
    server.write_kubeconfig(tmp / f"kubeconfig-{nodes}")
    source = ClusterSource(f"bench-{nodes}", "kubeconfig", str(tmp / f"kubeconfig-{nodes}"))
    api = api_client_for(source)
    reader = ClusterReader(api, page_size=500, timeout=120)
    result, read_t = timed(reader.read)

    # Typed vs raw for Pods, the biggest kind: same pages, two ways of reading them.
    core = k8s.CoreV1Api(api)

    def typed_pods() -> int:
        n, token = 0, None
        while True:
            page = core.list_pod_for_all_namespaces(limit=500, _continue=token)
            n += len(page.items)
            token = page.metadata._continue
            if not token:
                return n

    def raw_pods() -> int:
        from collector.kinds import BY_KIND

        return len(ClusterReader(api, page_size=500, timeout=120).list_items(BY_KIND["Pod"]))

    _, typed_t = timed(typed_pods)
    _, raw_pods_t = timed(raw_pods)

    cluster = get_cluster(source.name)
    from django.utils import timezone

    now = timezone.now

    def write(objs, at):  # type: ignore[no-untyped-def]
        snap = start_snapshot(cluster, at, "bench", started=now())
        return write_snapshot(snap, objs.objects, objs.complete_kinds, finished=now())

    first, first_t = timed(write, result, SYNTHETIC_BASE)
    result2, read2_t = timed(ClusterReader(api, page_size=500, timeout=120).read)
    unchanged, unchanged_t = timed(write, result2, SYNTHETIC_BASE + timedelta(seconds=30))
    server.cluster.advance()
    result3, read3_t = timed(ClusterReader(api, page_size=500, timeout=120).read)
    churned, churn_t = timed(write, result3, t1)
    server.stop()
    return {
        "nodes": nodes,
        "objects": first.objects_seen,
        "list_bytes_mb": round(len(raw) / 1e6, 1),
        "generate_s": round(gen_t, 2),
        "json_loads_s": round(parse_t, 3),
        "orjson_loads_s": round(orjson_t, 3),
        "collector_read_s": round(read_t, 3),
        "read_vs_json_loads": round(read_t / parse_t, 2),
        "typed_pods_s": round(typed_t, 3),
        "raw_pods_s": round(raw_pods_t, 3),
        "typed_vs_raw": round(typed_t / raw_pods_t, 1),
        "first_write_s": round(first_t, 2),
        "first_versions": first.versions_written,
        "unchanged_read_plus_write_s": round(read2_t + unchanged_t, 3),
        "unchanged_write_s": round(unchanged_t, 3),
        "unchanged_versions": unchanged.versions_written,
        "unchanged_vs_json_loads": round((read2_t + unchanged_t) / parse_t, 2),
        "churn_read_plus_write_s": round(read3_t + churn_t, 3),
        "churn_versions": churned.versions_written,
        "churn_deletions": churned.deletions,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 2000])
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/claimline_bench")
    )
    args = parser.parse_args()
    setup_django(args.database_url)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for n in args.nodes:
            print(json.dumps(run(n, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
