#!/usr/bin/env python
"""A week of 30-second snapshots of a 2,000-node cluster with 1% hourly churn, without 20,160 collections.

    .venv/bin/python bench/week_history.py [--nodes 2000] [--days 7 | --hours H] [--database claimline_bench_week]

How it is built (cluster ``week``, from Monday 2026-11-16 00:00 UTC):

  - Hour h (0 <= h < 24 * days) starts with the synthetic cluster's generation h
    (``demo.synthetic`` with ``interval=1h, churn=0.01``: 1% of the workload units — a GPU pod
    with its claim and events, a pending pod, a plain pod — change per generation). It goes
    through the collector's own filters (Pods that use claims, Events about them) and
    normalizer, then ``collector.history_writer.start_snapshot`` + ``write_snapshot`` with every kind
    complete: the real write path stores the changed objects, supersedes their heads and
    records deletions, exactly as a collection would.
  - The other 119 snapshots of the hour are recorded as ``Snapshot`` rows (status ok,
    ``objects_seen`` = the hour's object count, ``versions_written`` = 0, ``deletions`` = 0,
    same source text as the collected ones).

Why that is what collection would store: between generations the cluster's content does not
change; only node heartbeats and resourceVersions move, and the normalizer drops both (which
``bench/snapshot_cost.py`` checks: an unchanged collection writes 0 versions). A collection of
unchanged content writes its ``Snapshot`` row and nothing else, so the tables hold the same
rows. Generations are computed with the churn state carried from hour to hour (same result as
``synthetic_cluster(..., generation=h)``, checked at start on a small cluster) and without
plain pods (``pods_per_node=0``): the collector drops plain pods anyway (also checked).

The churn model is the generator's: each churned unit jumps to its next state. A real
cluster's replacement Pods pass through intermediate states (Pending, ContainerCreating,
Terminating) that a 30 s collector would also store; that adds versions in proportion to
the states observed, never in proportion to the number of snapshots.

Prints JSON lines: a line per day (rows, sizes) and a summary with bytes/day.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import load, machine, recreate_database, setup_django, stored_objects  # noqa: E402

logging.getLogger("claimline.history").setLevel(logging.WARNING)  # a line per hour is noise here

WEEK_START = datetime(2026, 11, 16, tzinfo=UTC)  # a Monday, so the weekly review covers it exactly
HOUR = timedelta(hours=1)
# What collect.reader_for records for a kubeconfig cluster; same length as a real run's row.
SOURCE = "api https://10.0.0.1:6443 (kubeconfig /etc/claimline/kubeconfig)"
TABLES = ("collector_objectversion", "collector_snapshot", "collector_cluster")


def generations(nodes: int, start: datetime, hours: int, churn: float, pods_per_node: int = 0) -> Any:
    """Generation 0..hours-1 of the synthetic cluster, one hour apart, each as a list of objects.

    ``_Generator.churned`` replays every earlier generation for every unit (O(h) each); this
    carries each unit's (times churned, last generation) from one hour to the next instead.
    """
    from collector.gcpause import gc_paused
    from demo import synthetic

    memo: dict[int, tuple[int, int, int]] = {}  # unit -> (generation, times, last)

    class Incremental(synthetic._Generator):
        def churned(self, unit: int) -> tuple[int, int]:
            gen, times, last = memo.get(unit, (0, 0, 0))
            for k in range(gen + 1, self.generation + 1):
                if synthetic._frac(self.seed, unit, k, synthetic._S_CHURN) < self.churn:
                    times, last = times + 1, k
            memo[unit] = (self.generation, times, last)
            return times, last

    for h in range(hours):
        gen = Incremental(nodes, 8, start + h * HOUR, 0, churn, h, HOUR, pods_per_node)
        with gc_paused():
            yield list(gen)


def check_equivalence() -> None:
    """The shortcuts above change nothing a collection would store."""
    from demo.synthetic import synthetic_cluster

    nodes, hours = 12, 30
    fast = list(generations(nodes, WEEK_START, hours, churn=0.2, pods_per_node=30))
    for h in (0, 1, 7, hours - 1):
        slow = synthetic_cluster(nodes, at=WEEK_START + h * HOUR, churn=0.2, generation=h, interval=HOUR)
        if fast[h] != slow:
            raise SystemExit(f"incremental churn differs from synthetic_cluster at generation {h}")
    lean = list(generations(nodes, WEEK_START, hours, churn=0.2, pods_per_node=0))
    for h in (0, 1, hours - 1):
        full = {(o.key, o.content_hash) for o in stored_objects(fast[h])}
        if full != {(o.key, o.content_hash) for o in stored_objects(lean[h])}:
            raise SystemExit(f"dropping plain pods changes what is stored at generation {h}")


def sizes() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cur:
        out: dict[str, Any] = {}
        for table in TABLES:
            cur.execute("SELECT pg_total_relation_size(%s), pg_relation_size(%s)", [table, table])
            total, heap = cur.fetchone()
            cur.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - fixed table names
            out[table] = {"rows": cur.fetchone()[0], "total_bytes": total, "heap_bytes": heap}
        out["total_bytes"] = sum(v["total_bytes"] for v in out.values() if isinstance(v, dict))
        return out


def vacuum() -> None:
    from django.db import connection

    # What autovacuum does over a day: superseded heads' old tuples become reusable space.
    with connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"VACUUM ANALYZE {table}")


def write_hours(cluster_name: str, nodes: int, hours: int, churn: float, interval: int) -> Any:
    """Write ``hours`` hours of the cluster's history (see the module docstring); yields after each hour.

    Yields ``(hour, totals)``; ``views_bench.py`` builds its clusters with this too.
    """
    from collector.history_writer import get_cluster, start_snapshot, write_snapshot
    from collector.kinds import KINDS
    from collector.models import Snapshot

    cluster = get_cluster(cluster_name)
    per_hour = 3600 // interval
    totals = {"versions": 0, "deletions": 0, "snapshots": 0, "objects_seen": 0}
    for h, objects in enumerate(generations(nodes, WEEK_START, hours, churn)):
        at = WEEK_START + h * HOUR
        stored = stored_objects(objects)
        del objects
        snap = start_snapshot(cluster, at, SOURCE, started=at)
        result = write_snapshot(snap, stored, KINDS, finished=at + timedelta(seconds=4))
        totals["versions"] += result.versions_written
        totals["deletions"] += result.deletions
        totals["objects_seen"] = result.objects_seen
        Snapshot.objects.bulk_create(
            [
                Snapshot(
                    cluster=cluster,
                    at=at + timedelta(seconds=k * interval),
                    started=at + timedelta(seconds=k * interval),
                    finished=at + timedelta(seconds=k * interval + 4),
                    source=SOURCE,
                    status=Snapshot.Status.OK,
                    objects_seen=result.objects_seen,
                )
                for k in range(1, per_hour)
            ],
            batch_size=2000,
        )
        totals["snapshots"] += per_hour
        yield h, totals


def build(nodes: int, days: int, churn: float, interval: int, hours: int | None = None) -> dict[str, Any]:
    hours = hours if hours is not None else 24 * days
    span = hours / 24  # days
    baseline: dict[str, Any] | None = None
    started = time.perf_counter()
    totals: dict[str, int] = {}
    for h, totals in write_hours("week", nodes, hours, churn, interval):
        if h == 0:
            vacuum()
            baseline = sizes()
            print(json.dumps({"after": "first hour", "objects": totals["objects_seen"], **baseline}), flush=True)
        if (h + 1) % 24 == 0:
            vacuum()
            print(
                json.dumps(
                    {
                        "day": (h + 1) // 24,
                        **totals,
                        "elapsed_s": round(time.perf_counter() - started),
                        "load": load(),
                        **sizes(),
                    }
                ),
                flush=True,
            )
    assert baseline is not None
    final = sizes()
    return {
        "nodes": nodes,
        "days": span,
        "snapshot_interval_s": interval,
        "hourly_churn": churn,
        **{k: v for k, v in totals.items() if k != "objects_seen"},
        "total_bytes": final["total_bytes"],
        "bytes_per_day_total": round(final["total_bytes"] / span),
        "growth_bytes_per_day": round((final["total_bytes"] - baseline["total_bytes"]) / span),
        "first_hour_bytes": baseline["total_bytes"],
        "snapshot_table_bytes_per_day": round(
            (final["collector_snapshot"]["total_bytes"] - baseline["collector_snapshot"]["total_bytes"]) / span
        ),
        "versions_per_day": round(totals["versions"] / span),
        "objectversion_rows": final["collector_objectversion"]["rows"],
        "snapshot_rows": final["collector_snapshot"]["rows"],
        "build_s": round(time.perf_counter() - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--hours", type=int, help="instead of --days (the smoke test builds 2 hours)")
    parser.add_argument("--churn", type=float, default=0.01, help="fraction of workload units changed per hour")
    parser.add_argument("--interval", type=int, default=30, help="seconds between snapshots")
    parser.add_argument("--database", default="claimline_bench_week")
    parser.add_argument("--skip-check", action="store_true")
    args = parser.parse_args()
    if 3600 % args.interval:
        parser.error("--interval must divide an hour")
    if not args.skip_check:
        check_equivalence()
    setup_django(recreate_database(args.database))
    print(json.dumps({"machine": machine(), "load_before": load(), "database": args.database}), flush=True)
    print(json.dumps(build(args.nodes, args.days, args.churn, args.interval, args.hours)), flush=True)


if __name__ == "__main__":
    main()
