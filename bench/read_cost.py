#!/usr/bin/env python
"""What reading stored history costs with versions the door checked (marked) and without the mark.

    .venv/bin/python bench/read_cost.py --nodes 2000 --hours 2 --repeat 5
    .venv/bin/python bench/read_cost.py --reuse --nodes 2000 --repeat 5   # the history built last time

Every stored version is read through ``history_reader.readable``. A version written through
``normalize`` carries ``ObjectVersion.shapes_checked`` (the door checked its fields' types) and is
only decoded; one without it (history stored before the door checked) has every field checked
against the API's types again, on every read. This builds ``--hours`` hours of the synthetic cluster
(``week_history.write_hours``: 30 s snapshots, 1% hourly churn; every version marked, as a
collection writes it) and then, ``--repeat`` times, reads it both ways in one process, alternately:
as stored (marked), and with every mark cleared inside a transaction rolled back afterwards (the
same rows as history stored before the check). Each read opens a fresh ``StoredHistory`` as of the
newest snapshot and decodes

- ``state``: every live object of every kind (what a page or derivation on read loads);
- ``versions``: every version of the ResourceClaims, Pods and Events up to it (what the weekly
  review, the leak report and the Event index read on read).

Each is timed in wall-clock seconds and in this process's CPU seconds (the decoding and checking; the
database's own time is another process's, and on a loaded machine the CPU figure moves less).
Prints a JSON line per read, then one with the medians and how much slower unmarked reads are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import load, machine, median, open_database  # noqa: E402

DATABASE = "claimline_bench_read"


def build(nodes: int, hours: int, churn: float) -> dict[str, Any]:
    from bench.week_history import write_hours

    started = time.perf_counter()
    totals: dict[str, int] = {}
    for _h, written in write_hours(f"n{nodes}", nodes, hours, churn, interval=30):
        totals = written
    return {"built": f"n{nodes}", "build_s": round(time.perf_counter() - started, 1), **totals}


def read_once(cluster: Any) -> dict[str, float]:
    from collector.history_reader import StoredHistory

    history = StoredHistory(cluster)
    started, cpu = time.perf_counter(), time.process_time()
    live = sum(len(objects) for _kind, objects in history.state.objects.items())
    state_s, state_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    started, cpu = time.perf_counter(), time.process_time()
    versions = sum(
        len(v) for kind in ("ResourceClaim", "Pod", "Event") for v in history.all_versions(kind).values()
    )
    versions_s, versions_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    history.release()
    return {
        "state_s": state_s, "state_cpu_s": state_cpu_s, "versions_s": versions_s, "versions_cpu_s": versions_cpu_s,
        "live_objects": live, "versions": versions,
    }


def measure(cluster: Any, marked: bool) -> dict[str, Any]:
    from django.db import transaction

    from collector.models import ObjectVersion

    with transaction.atomic():
        rows = ObjectVersion.objects.filter(cluster=cluster)
        if not marked:
            rows.update(shapes_checked=None)
        unmarked = rows.filter(shapes_checked__isnull=True, deleted=False).count()
        result = read_once(cluster)
        transaction.set_rollback(True)
    return {"marked": marked, "unmarked_versions": unmarked, **result, "load": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--hours", type=int, default=2, help="hours of history to build")
    parser.add_argument("--churn", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=5, help="reads each way")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--reuse", action="store_true", help="read the history a previous run built")
    args = parser.parse_args()
    open_database(args.database, args.reuse)
    from collector.models import Cluster

    print(json.dumps({"machine": machine()}), flush=True)
    if not args.reuse:
        print(json.dumps(build(args.nodes, args.hours, args.churn)), flush=True)
    cluster = Cluster.objects.get(name=f"n{args.nodes}")
    read_once(cluster)  # warm the database's cache and the process
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(args.repeat):
        for marked in (True, False):
            run = measure(cluster, marked)
            runs[marked].append(run)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in run.items()}), flush=True)
    summary: dict[str, Any] = {"nodes": args.nodes, "repeat": args.repeat}
    for key in ("state_s", "state_cpu_s", "versions_s", "versions_cpu_s"):
        marked_s, unmarked_s = (median([r[key] for r in runs[m]]) for m in (True, False))
        summary[f"{key}_marked"] = round(marked_s, 3)
        summary[f"{key}_unmarked"] = round(unmarked_s, 3)
        summary[f"{key.removesuffix('_s')}_unmarked_slower"] = f"{(unmarked_s / marked_s - 1) * 100:.0f}%"
    summary["load"] = load()
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
