#!/usr/bin/env python
"""What keeping a quiet cluster current costs: watching it against polling it.

    .venv/bin/python bench/watch_cost.py --nodes 200 2000 --minutes 10 [--interval 30]

For each size: the synthetic cluster (``demo/synthetic.py``: N nodes x 8 GPUs, ~30 Pods per node, claims
and events), served by the fake API server in its own process (bookmarks every 60 s, as kube-apiserver
sends them), stored once by a collection. Then, each as its own process with derivation off (this is the
collector's cost; deriving an empty snapshot is the same small cost either way):

  - ``manage.py collect`` (polling every ``--interval`` seconds), and
  - ``manage.py watch`` (list once, then watch; an empty snapshot every ``--interval`` seconds),

each measured over ``--minutes`` of no change once it is up (polling: after its first collection;
watching: once every kind is listed): CPU seconds of the process (``/proc/PID/stat``), bytes the
API server sent (response bodies, its ``bytes_sent``), requests, versions written (0: nothing changed),
peak resident memory. Also what getting there cost: a process start plus one collection, against a
process start plus the watcher's initial lists. Each database is ``claimline_bench_watch_<N>``,
recreated; results print as JSON lines.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (  # noqa: E402
    PYTHON,
    ROOT,
    FakeServerProcess,
    load,
    machine,
    recreate_database,
    run_child,
    scratch_dir,
)

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stored(db: str) -> tuple[int, int]:
    """(snapshots, versions) stored so far."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        snapshots = conn.execute("SELECT count(*) FROM collector_snapshot").fetchone()
        versions = conn.execute("SELECT count(*) FROM collector_objectversion").fetchone()
    return int(snapshots[0] if snapshots else 0), int(versions[0] if versions else 0)


def wait(condition: Any, proc: subprocess.Popen[bytes], what: str, timeout: float = 3600) -> float:
    start = time.monotonic()
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{what}: timed out")
        time.sleep(0.2)
    return time.monotonic() - start


def window(
    command: list[str], env: dict[str, str], server: FakeServerProcess, db: str, ready: Any, minutes: float, log: Path
) -> dict[str, Any]:
    """Start ``command``; once ``ready(server)`` holds, measure ``minutes`` of it; then stop it."""
    started = time.monotonic()
    bytes_before_start = server.state()["bytes_sent"]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait(lambda: ready(server, db), proc, f"{command[2]} to be up")
            up_s = time.monotonic() - started
            up_cpu = cpu_s(proc.pid)
            state = server.state()
            snapshots, versions = stored(db)
            requests = state["request_count"]
            time.sleep(minutes * 60)
            cpu = cpu_s(proc.pid) - up_cpu
            rss = peak_rss_mb(proc.pid)
            after = server.state()
            snapshots_after, versions_after = stored(db)
        finally:
            proc.send_signal(signal.SIGINT if command[2] == "collect" else signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {
        "startup_s": round(up_s, 1),
        "startup_cpu_s": round(up_cpu, 2),
        "startup_bytes": state["bytes_sent"] - bytes_before_start,
        "cpu_s": round(cpu, 2),
        "bytes": after["bytes_sent"] - state["bytes_sent"],
        "requests": after["request_count"] - requests,
        "snapshots": snapshots_after - snapshots,
        "versions": versions_after - versions,
        "peak_rss_mb": round(rss),
    }


def run(nodes: int, minutes: float, interval: int, keep: bool, only: str | None = None) -> dict[str, Any]:
    from demo.synthetic import synthetic_list_bytes

    work = scratch_dir(f"watch-cost-{nodes}-")
    scenario, kubeconfig = work / "scenario", work / "kubeconfig"
    scenario.mkdir()
    raw = synthetic_list_bytes(nodes)
    (scenario / "0.json").write_bytes(raw)
    list_bytes = len(raw)
    del raw
    db = recreate_database(f"claimline_bench_watch_{nodes}")
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
        "CLAIMLINE_CLUSTERS": f"bench-{nodes}=kubeconfig:{kubeconfig}",
        "CLAIMLINE_VAR_DIR": str(ROOT / "var" / "bench"),
        "CLAIMLINE_REQUEST_TIMEOUT": "300",
        "CLAIMLINE_SCHEDULER": "in-process",
        "CLAIMLINE_DERIVE": "false",
        "CLAIMLINE_COLLECT_INTERVAL": str(interval),
    }
    migrate = run_child([PYTHON, "manage.py", "migrate", "-v0"], env)
    if migrate.returncode:
        raise RuntimeError(migrate.stderr)
    server = FakeServerProcess(scenario, kubeconfig, "--bookmark-interval", "60")
    try:
        server.start()
        server.warm()
        seed = run_child([PYTHON, "manage.py", "collect", "--once"], env)
        if seed.returncode:
            raise RuntimeError(seed.stderr)
        objects = int(seed.stdout.split(": ", 2)[2].split()[0])

        def polled_once(_server: FakeServerProcess, database: str, base: int = stored(db)[0]) -> bool:
            return stored(database)[0] > base

        watch_log = work / "watch.log"

        def watching(_server: FakeServerProcess, _database: str) -> bool:
            # every kind listed, and the first batch (nothing changed: nothing written) behind it
            return "every kind listed" in watch_log.read_text(errors="replace") and not time.sleep(3)

        poll = watch = None
        if only != "watch":
            poll = window([PYTHON, "manage.py", "collect"], env, server, db, polled_once, minutes, work / "poll.log")
        if only != "poll":
            watch = window(
                [PYTHON, "manage.py", "watch", "--no-lease", "--alive-dir", str(work / "alive")],
                env, server, db, watching, minutes, watch_log,
            )
    finally:
        server.stop()
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    if (poll and poll["versions"]) or (watch and watch["versions"]):
        raise RuntimeError(f"a quiet cluster wrote versions: poll {poll}, watch {watch}")
    both = poll is not None and watch is not None
    return {
        "nodes": nodes,
        "objects_stored": objects,
        "list_bytes_mb": round(list_bytes / 1e6, 1),
        "minutes": minutes,
        "interval_s": interval,
        "poll": poll,
        "watch": watch,
        "watch_vs_poll_cpu": round(watch["cpu_s"] / poll["cpu_s"], 4) if both and poll["cpu_s"] else None,
        "watch_vs_poll_bytes": round(watch["bytes"] / poll["bytes"], 5) if both and poll["bytes"] else None,
        "load_after": load(),
    }


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[200])
    parser.add_argument("--minutes", type=float, default=10.0, help="of no change, measured for each mode")
    parser.add_argument("--interval", type=int, default=30, help="CLAIMLINE_COLLECT_INTERVAL (seconds)")
    parser.add_argument("--keep", action="store_true", help="keep the generated stage and the processes' logs")
    parser.add_argument("--only", choices=["poll", "watch"], help="measure one mode")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "load_before": load()}), flush=True)
    for n in args.nodes:
        print(json.dumps(run(n, args.minutes, args.interval, args.keep, args.only)), flush=True)


if __name__ == "__main__":
    main()
