#!/usr/bin/env python
"""Scale-out: two Celery workers collecting two clusters in parallel, against one worker doing both.

    .venv/bin/python bench/scale_out.py [--nodes 2000] [--repeat 3] [--redis-url redis://127.0.0.1:6379/13]

Two synthetic clusters (different seeds, same size) are each served by their own fake API
server process. ``CLAIMLINE_CLUSTERS`` lists both; workers are
``python -m celery -A claimline worker --pool solo`` on one queue (the project's settings ack
late with a prefetch of 1, so an idle second worker takes the second task). The timer runs
from enqueuing ``collect_cluster`` for both clusters until both snapshots are finished (polled
in the database); worker start-up is outside it.

  1. One worker: the first collections (everything written), then ``--repeat`` rounds of
     unchanged collections, one cluster after the other.
  2. A second worker joins: ``--repeat`` rounds of unchanged collections, in parallel.

Database ``claimline_bench_scale``, recreated. Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
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
    scratch_dir,
    setup_django,
)

QUEUE = "claimline-bench-scale"
CLUSTERS = ("scale-a", "scale-b")


def start_worker(name: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "claimline", "worker", "--pool", "solo", "-Q", QUEUE,
             "-n", f"{name}@bench", "--without-gossip", "--without-mingle", "-l", "INFO"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )


def wait_ready(app: Any, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= count:
            return
    raise RuntimeError(f"{count} worker(s) did not answer a ping within {timeout}s")


def collect_round(tasks: Any, since: datetime, timeout: float = 900) -> dict[str, Any]:
    """Enqueue one collection per cluster; wall time until both are finished.

    Finished means the snapshot row is final and the task let go of the cluster's collection
    lock: a round that started before that would see its task skipped as overlapping.
    """
    from collector.models import Snapshot

    locks = [tasks.collection_lock(name) for name in CLUSTERS]
    start = time.perf_counter()
    for name in CLUSTERS:
        tasks.collect_cluster.apply_async(args=(name,), queue=QUEUE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = list(
            Snapshot.objects.filter(cluster__name__in=CLUSTERS, started__gte=since)
            .exclude(status=Snapshot.Status.RUNNING)
            .values_list("cluster__name", "status", "versions_written", "started", "finished")
        )
        if {row[0] for row in done} >= set(CLUSTERS) and not any(lock.locked() for lock in locks):
            wall = time.perf_counter() - start
            return {
                "wall_s": round(wall, 2),
                # read_s: from the run's start to its ``finished`` stamp, which the collector
                # takes when the read is done, before writing.
                "runs": {
                    name: {
                        "status": status,
                        "versions": versions,
                        "read_s": round((fin - st).total_seconds(), 2) if fin is not None else None,
                    }
                    for name, status, versions, st, fin in done
                },
            }
        time.sleep(0.1)
    raise RuntimeError("collections did not finish in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()

    from demo.synthetic import synthetic_list_bytes

    work = scratch_dir("scale-out-")
    servers = []
    env_clusters = []
    for seed, name in enumerate(CLUSTERS):
        scenario = work / name
        scenario.mkdir()
        (scenario / "0.json").write_bytes(synthetic_list_bytes(args.nodes, seed=seed))
        kubeconfig = work / f"{name}.kubeconfig"
        servers.append(FakeServerProcess(scenario, kubeconfig))
        env_clusters.append(f"{name}=kubeconfig:{kubeconfig}")
    db = recreate_database("claimline_bench_scale")
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "REDIS_URL": args.redis_url,
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
        "CLAIMLINE_CLUSTERS": ",".join(env_clusters),
        "CLAIMLINE_SCHEDULER": "celery",
        "CLAIMLINE_VAR_DIR": str(ROOT / "var" / "bench"),
        "CLAIMLINE_REQUEST_TIMEOUT": "300",
    }
    os.environ.update({k: env[k] for k in ("REDIS_URL", "CLAIMLINE_CLUSTERS", "CLAIMLINE_SCHEDULER")})
    setup_django(db)
    from django.utils import timezone

    from claimline import tasks
    from claimline.celery import app

    print(json.dumps({"machine": machine(), "load_before": load(), "nodes_per_cluster": args.nodes}), flush=True)
    workers: list[subprocess.Popen[bytes]] = []
    # A background job ignores SIGINT; SIGTERM must still stop the workers and servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for server in servers:
            server.start()
            server.warm()
        app.control.purge()
        workers.append(start_worker("w1", env, work / "w1.log"))
        wait_ready(app, 1)
        first = collect_round(tasks, timezone.now())
        print(json.dumps({"phase": "first collections, one worker", **first, "load": load()}), flush=True)
        sequential = []
        for _ in range(args.repeat):
            r = collect_round(tasks, timezone.now())
            sequential.append(r["wall_s"])
            print(json.dumps({"phase": "unchanged, one worker", **r, "load": load()}), flush=True)
        workers.append(start_worker("w2", env, work / "w2.log"))
        wait_ready(app, 2)
        parallel = []
        for _ in range(args.repeat):
            r = collect_round(tasks, timezone.now())
            parallel.append(r["wall_s"])
            print(json.dumps({"phase": "unchanged, two workers", **r, "load": load()}), flush=True)
        print(
            json.dumps(
                {
                    "summary": True,
                    "nodes_per_cluster": args.nodes,
                    "sequential_wall_s": sequential,
                    "parallel_wall_s": parallel,
                    "speedup": round(median(sequential) / median(parallel), 2),
                    "load_after": load(),
                }
            ),
            flush=True,
        )
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
