"""A worker's memory and time over many churned snapshots: does it stay flat?

    .venv/bin/python bench/worker_memory.py --nodes 1000 --snapshots 12

In its own database (``claimline_bench_worker_memory``, recreated): the synthetic cluster's first
generation is written and derived (every live Pod), then ``--snapshots`` times, in this one process
as a worker runs them back to back: the next generation (1% churn, an hour later) is written as a
collection writes it, then what the collection path queues after it runs, in order: the
derivation (``derived.pipeline.derive_backlog``, which derives and renders /metrics and the
review), each freeing what it decoded. Prints a JSON line per snapshot: seconds for the write and
for the derivation with its renderings, and the process's resident memory after it (and its
peak so far). A worker that kept each snapshot's objects would grow by a snapshot's worth each line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import load, recreate_database, setup_django, stored_objects  # noqa: E402
from bench.derived_cost import CHURN, HOUR, WEEK_START, generations, write  # noqa: E402


def rss_mb() -> float:
    """Resident memory now (``/proc/self/statm``), in MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e6, 1)


def peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6, 1)  # KiB on Linux


def emit(**fields: Any) -> None:
    print(json.dumps({**fields, "rss_mb": rss_mb(), "peak_mb": peak_mb(), "load": load()}), flush=True)


def run(nodes: int, snapshots: int) -> None:
    from collector.gcpause import collect_less_often
    from collector.history_writer import get_cluster
    from derived.pipeline import derive_backlog

    collect_less_often()  # as in every Claimline process (collector.apps)
    cluster = get_cluster("bench")
    gens = generations(nodes, WEEK_START, snapshots + 1, CHURN)
    for i in range(snapshots + 1):
        started = time.perf_counter()
        snap = write(cluster, WEEK_START + i * HOUR, stored_objects(next(gens)))
        written = time.perf_counter() - started
        started = time.perf_counter()
        derived = derive_backlog(cluster.pk)
        emit(
            nodes=nodes,
            snapshot=i,
            versions=snap.versions_written,
            deletions=snap.deletions,
            write_s=round(written, 2),
            derive_and_render_s=round(time.perf_counter() - started, 2),
            derived=[d.describe() for d in derived],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--snapshots", type=int, default=12, help="churned snapshots after the first")
    args = parser.parse_args()
    os.environ["CLAIMLINE_CLUSTERS"] = "bench=in-cluster"
    setup_django(recreate_database("claimline_bench_worker_memory"))
    logging.getLogger("claimline").setLevel(logging.WARNING)
    run(args.nodes, args.snapshots)


if __name__ == "__main__":
    main()
