#!/usr/bin/env python
"""What the derived layer weighs beside the history it derives from (issue 10: at most 50%).

    .venv/bin/python bench/layer_storage.py [--nodes 2000] [--hours 24] [--database claimline_bench_storage]
    .venv/bin/python bench/layer_storage.py --reuse --database claimline_bench_week   # a history built before
    .venv/bin/python bench/layer_storage.py --nodes 200 5000 --hours 168 --build-only --database claimline_bench_week5k

Builds ``--hours`` hours of 30-second snapshots with 1% hourly churn (``week_history.write_hours``, the
collector's own write path), derives them as ``rebuild-derived`` does, then runs ``VACUUM FULL`` on the
history and on every table of the layer, so both are measured as compacted rows rather than as whatever
dead space the build left. With ``--reuse`` it measures the clusters a previous run (of this script or of
``views_bench.py``) built, deriving what is not derived yet. ``--build-only`` stops after writing the
history (clusters ``n<nodes>``, as ``views_bench.py`` names them): a week at 5,000 nodes takes long enough
to build once and derive with the code to measure later (``--reuse``, or ``views_bench.py --reuse --derive``).

Prints a JSON line per table (rows; heap, TOAST and index bytes) and a summary with the layer's share
of the history (``layer_vs_history``, the figure the issue bounds: the history being the snapshots and
the object versions they stored, as the layer counts its own per-snapshot rows), and of the object
versions alone (``layer_vs_object_versions``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import machine, open_database  # noqa: E402

logging.getLogger("claimline.derived").setLevel(logging.WARNING)  # a line per snapshot is noise here

# The history a derivation reads: each snapshot's record and the object versions it stored. The layer's
# own per-snapshot record (``DerivedSnapshot``) is counted in the layer, so the snapshots count here.
HISTORY = ("collector_objectversion", "collector_snapshot")


def layer_tables() -> list[str]:
    from django.apps import apps

    # Every table of the derived app, so a table added to the layer is counted without editing this list.
    return sorted(model._meta.db_table for model in apps.get_app_config("derived").get_models())


def table_size(table: str) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_relation_size(c.oid), COALESCE(pg_total_relation_size(c.reltoastrelid), 0),"
            " pg_indexes_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c WHERE c.relname = %s",
            [table],
        )
        heap, toast, indexes, total = cur.fetchone()
        cur.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608 - names from the app registry
        rows = cur.fetchone()[0]
    return {"table": table, "rows": rows, "heap_bytes": heap, "toast_bytes": toast, "index_bytes": indexes,
            "total_bytes": total}


def measure() -> dict[str, Any]:
    from django.db import connection

    tables = [*HISTORY, *layer_tables()]
    with connection.cursor() as cur:
        for table in tables:
            cur.execute(f'VACUUM FULL ANALYZE "{table}"')
    sizes = [table_size(t) for t in tables]
    versions = sizes[0]["total_bytes"]
    history = sum(s["total_bytes"] for s in sizes[: len(HISTORY)])
    layer = sum(s["total_bytes"] for s in sizes[len(HISTORY) :])
    for s in sizes:
        print(json.dumps({**s, "share_of_history": round(s["total_bytes"] / history, 4) if history else None}),
              flush=True)
    return {"history_bytes": history, "object_versions_bytes": versions, "layer_bytes": layer,
            "layer_vs_history": round(layer / history, 4) if history else None,
            "layer_vs_object_versions": round(layer / versions, 4) if versions else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2000], help="cluster sizes, one cluster each")
    parser.add_argument("--hours", type=int, default=24, help="hours of 30 s snapshots")
    parser.add_argument("--churn", type=float, default=0.01, help="fraction of workload units changed per hour")
    parser.add_argument("--database", default="claimline_bench_storage")
    parser.add_argument("--reuse", action="store_true", help="measure the clusters a previous run built")
    parser.add_argument("--build-only", action="store_true", help="write the history, derive and measure nothing")
    args = parser.parse_args()
    open_database(args.database, reuse=args.reuse)
    print(json.dumps({"machine": machine(), "database": args.database}), flush=True)
    from bench.views_bench import build, derive  # the same clusters (n<nodes>), built and derived alike
    from collector.models import Cluster

    if not args.reuse:
        build(sorted(set(args.nodes)), args.hours, args.churn)
    if args.build_only:
        return
    clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    derive(clusters)
    built = {} if args.reuse else {"nodes": args.nodes, "hours": args.hours}
    print(json.dumps({"clusters": clusters, **built, **measure()}), flush=True)


if __name__ == "__main__":
    main()
