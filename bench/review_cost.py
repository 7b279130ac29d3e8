#!/usr/bin/env python
"""The weekly review read from the derived layer's allocation spans next to the review on read.

    .venv/bin/python bench/review_cost.py --nodes 200 1000 --hours 3 --repeat 3
    .venv/bin/python bench/review_cost.py --nodes 200 --hours 192 --repeat 3   # eight days: history past the week
    .venv/bin/python bench/review_cost.py --reuse ...                          # the clusters built last time

For each size N it builds cluster ``nN`` in its own database (``claimline_bench_review``) as
``views_bench.py`` does (``week_history.write_hours``: ``--hours`` hourly generations of the synthetic
cluster with 1% churn, a snapshot every 30 s, from Monday 2026-11-16), then ``rebuild-derived``
(timed). Then, in this process and one after the other so both see the same load, ``--repeat`` times
each: ``derived.review.review_read`` (spans) and ``capacity.weekly_review`` (every claim version of the
eight weeks), for the week of 2026-11-16 as of the newest snapshot, each over a freshly opened
``StoredHistory`` (cold, as after every new snapshot). The two reviews must be equal.

Prints a JSON line per size: the fastest and median seconds of each, the rows each read
(spans, claim and Pod versions), and the load average.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import load, open_database  # noqa: E402

DATABASE = "claimline_bench_review"
WEEK = datetime(2026, 11, 16, tzinfo=UTC)


def cluster_name(nodes: int) -> str:
    return f"n{nodes}"


def build(nodes: int, hours: int, churn: float) -> None:
    from django.core.management import call_command

    from bench.week_history import write_hours

    started = time.perf_counter()
    for _hour, _totals in write_hours(cluster_name(nodes), nodes, hours, churn, interval=30):
        pass
    built = time.perf_counter()
    call_command("rebuild-derived", "--cluster", cluster_name(nodes), stdout=io.StringIO())
    print(
        json.dumps(
            {
                "built": cluster_name(nodes),
                "nodes": nodes,
                "hours": hours,
                "build_s": round(built - started, 1),
                "rebuild_derived_s": round(time.perf_counter() - built, 1),
                "load": load(),
            }
        ),
        flush=True,
    )


def measure(nodes: int, repeat: int) -> dict[str, Any]:
    from collector.history_reader import StoredHistory
    from collector.models import Cluster, ObjectVersion
    from derived.models import AllocationSpan
    from derived.review import review_read
    from derived.thresholds import leak_thresholds
    from derived.writer import covered
    from domain.reports.capacity import weekly_review

    cluster = Cluster.objects.get(name=cluster_name(nodes))
    thresholds = leak_thresholds()
    if not covered(StoredHistory(cluster).snapshot_pk):
        raise SystemExit(f"{cluster.name} is not derived: run without --reuse")
    times: dict[str, list[float]] = {"layer": [], "on_read": []}
    for _ in range(repeat):
        docs = []
        for key, review in (("layer", review_read), ("on_read", weekly_review)):
            history = StoredHistory(cluster)
            started = time.perf_counter()
            docs.append(review(history, WEEK, thresholds))
            times[key].append(time.perf_counter() - started)
        if docs[0] != docs[1]:
            raise SystemExit(f"{cluster.name}: the review read from the layer differs from the review on read")
    versions = ObjectVersion.objects.filter(cluster=cluster)
    return {
        "nodes": nodes,
        "layer_s": round(min(times["layer"]), 3),
        "layer_median_s": round(statistics.median(times["layer"]), 3),
        "on_read_s": round(min(times["on_read"]), 3),
        "on_read_median_s": round(statistics.median(times["on_read"]), 3),
        "spans": AllocationSpan.objects.filter(cluster=cluster).count(),
        "claim_versions": versions.filter(kind="ResourceClaim").count(),
        "pod_versions": versions.filter(kind="Pod").count(),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--hours", type=int, default=3, help="hours of history per cluster")
    parser.add_argument("--churn", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--reuse", action="store_true", help="measure the clusters a previous run built")
    args = parser.parse_args()
    open_database(args.database, reuse=args.reuse)
    print(json.dumps({"load_before": load(), "database": args.database, "hours": args.hours}), flush=True)
    for nodes in sorted(set(args.nodes)):
        if not args.reuse:
            build(nodes, args.hours, args.churn)
        print(json.dumps(measure(nodes, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
