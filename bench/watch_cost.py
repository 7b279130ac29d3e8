#!/usr/bin/env python
"""Keeping a cluster current: watching it against polling it, side by side, quiet or churning.

    .venv/bin/python bench/watch_cost.py --nodes 5000 --minutes 30 [--churn 0.01] [--interval 30]

For each size: the synthetic cluster (``demo/synthetic.py``: N nodes x 8 GPUs, ~30 Pods per node, claims
and events), served by the fake API server in its own process (bookmarks every 60 s, as kube-apiserver
sends them), stored once by a collection into one database, copied into a second. Then both at once,
each as its own process on its own database against the same server:

  - ``manage.py collect`` (polling every ``--interval`` seconds), and
  - ``manage.py watch --no-lease`` (list once, then watch; a checkpoint every ``--interval`` seconds),

measured over ``--minutes`` once both are up (polling: its first collection started; watching: every
kind listed and the first batch after, what changed since the seed, stored): CPU seconds of each
process (``/proc/PID/stat``), bytes the API server sent each (response bodies: watches are the
watcher's, lists the poller's), requests, snapshots and versions written, resident memory sampled
every minute (first, last, max) and its peak (``VmHWM``).

``--churn F``: F of the workload units change per hour (the generator's churn model, the one
``bench/week_history.py`` uses: the cluster at generation 0 against generation 1 with churn
F x minutes / 60). The fake server plays the difference in small steps spread over the window
(``demo/fake_churn.py``), minus a tail of two intervals so both modes have seen everything when it
ends, and records when each change became visible. Reported per mode: the versions written
((kind, UID, content hash) sets compared between the modes), each version's latency (the server's
change → the first moment the snapshot holding it is seen committed, the database polled every
0.1 s: p50/p95/max), and the derivation backlog when the window ends (snapshots newer than the
newest derived one; derivation is on for a churn run).

``--scheduler``: what runs the periodic work. Quiet runs default to ``celery`` (derivation and
notices are Celery's tasks, no worker runs: each process's cost is the collector's alone); churn
runs to ``in-process`` (each process derives its snapshots and tells notices itself, so the backlog
is measured). ``--worker`` is the deployment's shape: the watcher only stores, and a Celery worker of
its own (``--pool solo``: one process, so its CPU is all in it; its own Redis database) derives what
it queues, coalesced; the worker's CPU and memory and the watcher's backlog are reported beside the
watcher's. The poller then queues to a Redis database no worker reads, so its cost stays its
collector's alone. Results print as JSON lines; databases are
``claimline_bench_watch_<N>[_churn]_{poll,watch}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (  # noqa: E402
    PG_BASE,
    PYTHON,
    ROOT,
    FakeServerProcess,
    database_name,
    load,
    machine,
    recreate_database,
    run_child,
    scratch_dir,
)

TICK = os.sysconf("SC_CLK_TCK")
STEP_S = 5.0  # how often the churn changes something


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def query(db: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def newest_snapshot(db: str) -> int:
    return int(query(db, "SELECT coalesce(max(id), 0) FROM collector_snapshot")[0][0])


def backlog(db: str) -> dict[str, Any]:
    """Usable snapshots newer than the newest derived one (the derivation's backlog), and the oldest's age."""
    rows = query(
        db,
        "SELECT count(*), extract(epoch FROM now() - min(s.at)) FROM collector_snapshot s "
        "WHERE s.status IN ('ok', 'partial') AND s.at > coalesce("
        "(SELECT max(d.at) FROM derived_derivedsnapshot d WHERE d.cluster_id = s.cluster_id), '-infinity')",
    )
    count, age = rows[0]
    return {"snapshots": int(count), "oldest_age_s": round(float(age), 1) if age is not None else None}


class CommitWatch(threading.Thread):
    """When each snapshot of a database is first seen committed (status ok/partial), polled every 0.1 s."""

    def __init__(self, db: str, after: int) -> None:
        super().__init__(daemon=True)
        self.db, self.after = db, after
        self.seen: dict[int, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.db, autocommit=True) as conn:
            while not self.stopping.is_set():
                rows = conn.execute(
                    "SELECT id FROM collector_snapshot WHERE id > %s AND status IN ('ok', 'partial')", (self.after,)
                ).fetchall()
                now = time.time()
                for (snapshot_id,) in rows:
                    self.seen.setdefault(snapshot_id, now)
                self.stopping.wait(0.1)


class Process:
    """One mode's process, measured from ``mark`` on."""

    def __init__(self, mode: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.mode, self.log = mode, log
        self.out = log.open("wb")
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.out, stderr=subprocess.STDOUT)
        self.rss: list[float] = []
        self.started = time.monotonic()

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.mode}: the process exited with {self.proc.returncode} (see {self.log})")

    def mark(self) -> None:
        self.cpu0 = cpu_s(self.proc.pid)
        self.sample()

    def sample(self) -> None:
        self.rss.append(memory_mb(self.proc.pid, "VmRSS"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            # SIGTERM: the watcher stores what arrived and stops; the poller just stops (a SIGINT can land
            # inside a collection, where it may be swallowed)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def churn_schedule(nodes: int, fraction: float, window_s: float, active_s: float, path: Path) -> int:
    """The difference between the cluster's generation 0 and 1 (``fraction`` of the units churned) as
    steps every ``STEP_S`` over ``active_s`` seconds, written to ``path``; how many objects change.
    A unit's objects sit next to each other in the generator's order, so they change in one step."""
    import hashlib

    import orjson

    from collector.gcpause import gc_paused
    from demo.synthetic import SYNTHETIC_BASE, iter_synthetic

    interval = timedelta(seconds=window_s)

    def key(obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj.get("metadata") or {}
        return (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    with gc_paused():
        before: dict[tuple[str, str, str], tuple[bytes, int]] = {}
        for i, obj in enumerate(iter_synthetic(nodes, churn=fraction, interval=interval)):
            before[key(obj)] = (hashlib.blake2b(orjson.dumps(obj), digest_size=16).digest(), i)
        ops: list[tuple[float, Any]] = []
        kept: set[tuple[str, str, str]] = set()
        after = iter_synthetic(nodes, at=SYNTHETIC_BASE + interval, churn=fraction, generation=1, interval=interval)
        for i, obj in enumerate(after):
            k = key(obj)
            kept.add(k)
            was = before.get(k)
            if was is None or was[0] != hashlib.blake2b(orjson.dumps(obj), digest_size=16).digest():
                ops.append((i / len(before), obj))
        ops += [(i / len(before), list(k)) for k, (_d, i) in before.items() if k not in kept]
    ops.sort(key=lambda op: op[0])
    count = max(1, min(len(ops), int(active_s / STEP_S)))
    steps = []
    for n in range(count):
        part = [op for _pos, op in ops[n * len(ops) // count : (n + 1) * len(ops) // count]]
        steps.append(
            {
                "at": round(n * active_s / count, 3),
                "upserts": [op for op in part if isinstance(op, dict)],
                "deletes": [op for op in part if isinstance(op, list)],
            }
        )
    path.write_bytes(orjson.dumps({"steps": steps}))
    return len(ops)


def versions(db: str, after: int) -> dict[tuple[str, str, str], int]:
    """The versions written after snapshot ``after``: (kind, UID, content hash or "deleted") → snapshot."""
    rows = query(
        db,
        "SELECT kind, uid, CASE WHEN deleted THEN 'deleted' ELSE content_hash END, snapshot_id "
        "FROM collector_objectversion WHERE snapshot_id > %s",
        (after,),
    )
    return {(kind, uid, digest): snapshot for kind, uid, digest, snapshot in rows}


Emitted = dict[tuple[str, str], float]  # (kind, UID) → when the server made its change visible


def latency(written: dict[tuple[str, str, str], int], seen: dict[int, float], emitted: Emitted) -> dict[str, Any]:
    """Each version's delay from its object's change on the server to its snapshot seen committed."""
    delays = sorted(
        seen[snapshot] - emitted[(kind, uid)]
        for (kind, uid, _digest), snapshot in written.items()
        if (kind, uid) in emitted and snapshot in seen
    )
    if not delays:
        return {"n": 0}
    return {
        "n": len(delays),
        "p50_s": round(statistics.median(delays), 2),
        "p95_s": round(delays[min(len(delays) - 1, int(0.95 * len(delays)))], 2),
        "max_s": round(delays[-1], 2),
    }


def redis_db(url: str, number: int) -> str:
    """``url`` with its database number replaced: each side's queue apart from the other's."""
    base = url.split("?", 1)[0].rstrip("/")
    head, _sep, tail = base.rpartition("/")
    return f"{head if tail.isdigit() else base}/{number}"


def run(
    nodes: int,
    minutes: float,
    interval: int,
    churn: float,
    scheduler: str,
    keep: bool,
    worker: bool = False,
    worker_dbs: tuple[int, int] = (11, 12),
    tail: float | None = None,
) -> dict[str, Any]:
    from demo.synthetic import synthetic_list_bytes

    window_s = minutes * 60
    # both modes have seen the last change when the window ends: two intervals, unless a poller's collection
    # takes longer than one (at 5,000 nodes on a loaded machine, up to 83 s: ``--tail``)
    tail_s = min(tail if tail is not None else 2 * interval + 5, window_s / 2)
    work = scratch_dir(f"watch-cost-{nodes}-")
    scenario, kubeconfig = work / "scenario", work / "kubeconfig"
    scenario.mkdir()
    started = time.monotonic()
    raw = synthetic_list_bytes(nodes, churn=churn * minutes / 60, interval=timedelta(seconds=window_s))
    (scenario / "0.json").write_bytes(raw)
    list_bytes = len(raw)
    del raw
    changing = 0
    if churn:
        changing = churn_schedule(nodes, churn * minutes / 60, window_s, window_s - tail_s, work / "churn.json")
    derive = churn > 0 or worker
    name = f"claimline_bench_watch_{nodes}{'_churn' if churn else ''}"  # a quiet and a churning run can run at once
    poll_db = recreate_database(f"{name}_poll")
    base_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "claimline.settings",
        "CLAIMLINE_CLUSTERS": f"bench-{nodes}=kubeconfig:{kubeconfig}",
        "CLAIMLINE_VAR_DIR": str(ROOT / "var" / "bench"),
        "CLAIMLINE_REQUEST_TIMEOUT": "300",
        "CLAIMLINE_SCHEDULER": scheduler,
        "CLAIMLINE_DERIVE": "true" if derive else "false",
        "CLAIMLINE_COLLECT_INTERVAL": str(interval),
    }
    poll_env = {**base_env, "DATABASE_URL": poll_db}
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if worker:
        # two Redis databases (flushed first) the tests and the CI do not use (see scripts/test): the
        # poller's queue, unread, and the watcher's, which its worker reads
        poll_env["REDIS_URL"] = redis_db(redis_url, worker_dbs[0])
        base_env["REDIS_URL"] = redis_db(redis_url, worker_dbs[1])
        for url in (poll_env["REDIS_URL"], base_env["REDIS_URL"]):
            flush_redis(url)
    migrate = run_child([PYTHON, "manage.py", "migrate", "-v0"], poll_env)
    if migrate.returncode:
        raise RuntimeError(migrate.stderr)
    server = FakeServerProcess(scenario, kubeconfig, "--bookmark-interval", "60")
    procs: list[Process] = []
    commits: list[CommitWatch] = []
    try:
        server.start()
        server.warm()
        # the seed (derived in process when deriving, so both start derived), then the watcher's database as
        # a copy of it
        seeding = {**poll_env, "CLAIMLINE_SCHEDULER": "in-process"} if derive else poll_env
        seed = run_child([PYTHON, "manage.py", "collect", "--once"], seeding)
        if seed.returncode:
            raise RuntimeError(seed.stderr)
        objects = int(seed.stdout.split(": ", 2)[2].split()[0])
        watch_name = database_name(f"{name}_watch")
        query(f"{PG_BASE}/postgres", f'DROP DATABASE IF EXISTS "{watch_name}" WITH (FORCE)')
        query(f"{PG_BASE}/postgres", f'CREATE DATABASE "{watch_name}" TEMPLATE "{poll_db.rsplit("/", 1)[1]}"')
        watch_db = f"{PG_BASE}/{watch_name}"
        seeded = {"poll": newest_snapshot(poll_db), "watch": newest_snapshot(watch_db)}
        setup_s = time.monotonic() - started

        before = server.state()
        poll = Process("poll", [PYTHON, "manage.py", "collect"], poll_env, work / "poll.log")
        watch = Process(
            "watch",
            [PYTHON, "manage.py", "watch", "--no-lease", "--alive-dir", str(work / "alive")],
            {**base_env, "DATABASE_URL": watch_db},
            work / "watch.log",
        )
        procs = [poll, watch]
        if worker:
            deriver = Process(
                "worker",
                [PYTHON, "-m", "celery", "-A", "claimline", "worker", "--pool", "solo", "--loglevel", "INFO"],
                {**base_env, "DATABASE_URL": watch_db},
                work / "worker.log",
            )
            procs.append(deriver)
        up: dict[str, float] = {}
        up_cpu: dict[str, float] = {}
        deadline = time.monotonic() + 3600
        while len(up) < 2:  # the worker, when there is one, is up by then: it is not waited for
            for p in procs:
                p.alive()
            if "poll" not in up and newest_snapshot(poll_db) > seeded["poll"]:
                up["poll"], up_cpu["poll"] = time.monotonic() - poll.started, cpu_s(poll.proc.pid)
            if "watch" not in up and "in step with history" in watch.log.read_text(errors="replace"):
                # listed, and its first batch (what changed since the seed: nothing) behind it
                up["watch"], up_cpu["watch"] = time.monotonic() - watch.started, cpu_s(watch.proc.pid)
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for both modes to be up")
            time.sleep(0.2)
        at_up = server.state()
        for p in procs:
            p.mark()
        base = {"poll": newest_snapshot(poll_db), "watch": newest_snapshot(watch_db)}
        commits = [CommitWatch(poll_db, base["poll"]), CommitWatch(watch_db, base["watch"])]
        derived0 = derived_count(watch_db)
        for c in commits:
            c.start()
        t0 = time.monotonic()
        if churn:
            server.control("/_fake/churn", json.dumps({"file": str(work / "churn.json")}).encode())
        loads = [load()]
        while (left := t0 + window_s - time.monotonic()) > 0:
            time.sleep(min(60.0, left))
            for p in procs:
                p.alive()
                p.sample()
            loads.append(load())
        cpu = {p.mode: cpu_s(p.proc.pid) - p.cpu0 for p in procs}
        peak = {p.mode: memory_mb(p.proc.pid, "VmHWM") for p in procs}
        after = server.state()
        snapshots = {
            mode: int(query(db, "SELECT count(*) FROM collector_snapshot WHERE id > %s", (base[mode],))[0][0])
            for mode, db in (("poll", poll_db), ("watch", watch_db))
        }
        if worker:
            # the poller's queue is never read: its derivation is not part of this run
            backlogs: dict[str, Any] | None = {"poll": None, "watch": backlog(watch_db)}
        else:
            backlogs = {"poll": backlog(poll_db), "watch": backlog(watch_db)} if derive else None
        derivations = derived_count(watch_db) - derived0
        played: dict[str, Any] = (
            json.loads(urlopen_json(server, "/_fake/churn")) if churn else {"changes": [], "applied": 0}
        )
    finally:
        for c in commits:
            c.stopping.set()
        for p in procs:
            p.stop()
        server.stop()
    emitted: Emitted = {}
    for kind, uid, _type, _rv, when in played["changes"]:
        emitted[(kind, uid)] = when
    written = {"poll": versions(poll_db, base["poll"]), "watch": versions(watch_db, base["watch"])}
    seen = {"poll": commits[0].seen, "watch": commits[1].seen}
    watch_bytes = after["watch_bytes_sent"] - at_up["watch_bytes_sent"]
    poll_bytes = (after["bytes_sent"] - after["watch_bytes_sent"]) - (at_up["bytes_sent"] - at_up["watch_bytes_sent"])
    watch_requests = after["watch_requests"] - at_up["watch_requests"]
    poll_requests = (after["request_count"] - after["watch_requests"]) - (
        at_up["request_count"] - at_up["watch_requests"]
    )

    def rss(p: Process) -> dict[str, Any]:
        return {"first": round(p.rss[0]), "last": round(p.rss[-1]), "max": round(max(p.rss)), "samples": len(p.rss)}

    def mode(name: str, bytes_read: int, requests: int, startup_bytes: int) -> dict[str, Any]:
        p = poll if name == "poll" else watch
        return {
            "startup_s": round(up[name], 1),
            "startup_cpu_s": round(up_cpu[name], 2),
            "startup_bytes": startup_bytes,
            "cpu_s": round(cpu[name], 2),
            "bytes": bytes_read,
            "requests": requests,
            "snapshots": snapshots[name],
            "versions": len(written[name]),
            "latency": latency(written[name], seen[name], emitted) if churn else None,
            "backlog_at_end": backlogs[name] if backlogs else None,
            "rss_mb": rss(p),
            "peak_rss_mb": round(peak[name]),
        }

    result_poll = mode(
        "poll",
        poll_bytes,
        poll_requests,
        (at_up["bytes_sent"] - at_up["watch_bytes_sent"]) - (before["bytes_sent"] - before["watch_bytes_sent"]),
    )
    result_watch = mode("watch", watch_bytes, watch_requests, at_up["watch_bytes_sent"] - before["watch_bytes_sent"])
    result_worker = (
        {
            "cpu_s": round(cpu["worker"], 2),
            "derivations": derivations,
            "rss_mb": rss(procs[2]),
            "peak_rss_mb": round(peak["worker"]),
        }
        if worker
        else None
    )
    poll_set, watch_set = set(written["poll"]), set(written["watch"])
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    if not churn and (poll_set or watch_set):
        raise RuntimeError(f"a quiet cluster wrote versions: poll {len(poll_set)}, watch {len(watch_set)}")
    return {
        "nodes": nodes,
        "objects_stored": objects,
        "list_bytes_mb": round(list_bytes / 1e6, 1),
        "minutes": minutes,
        "interval_s": interval,
        "churn_per_hour": churn,
        "scheduler": scheduler,
        "derive": derive,
        "setup_s": round(setup_s),
        "objects_changed_by_server": changing,
        "churn_steps_applied": played["applied"],
        "tail_s": round(tail_s, 1),
        "poll": result_poll,
        "watch": result_watch,
        "watch_worker": result_worker,
        "versions_identical": poll_set == watch_set,
        "versions_only_poll": sorted(poll_set - watch_set)[:20],
        "versions_only_watch": sorted(watch_set - poll_set)[:20],
        "versions_only_counts": [len(poll_set - watch_set), len(watch_set - poll_set)],
        "watch_vs_poll_cpu": round(cpu["watch"] / cpu["poll"], 4) if cpu["poll"] else None,
        "watch_vs_poll_bytes": round(watch_bytes / poll_bytes, 6) if poll_bytes else None,
        "load": {"first": loads[0], "last": loads[-1], "max_1min": max(x[0] for x in loads)},
    }


def derived_count(db: str) -> int:
    return int(query(db, "SELECT count(*) FROM derived_derivedsnapshot")[0][0])


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5).flushdb()


def urlopen_json(server: FakeServerProcess, path: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}{path}", timeout=60) as resp:  # noqa: S310 - our loopback server
        return bytes(resp.read())


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[200])
    parser.add_argument("--minutes", type=float, default=10.0, help="measured, both modes at once")
    parser.add_argument("--interval", type=int, default=30, help="CLAIMLINE_COLLECT_INTERVAL (seconds)")
    parser.add_argument("--churn", type=float, default=0.0, help="fraction of workload units changed per hour")
    parser.add_argument(
        "--scheduler",
        choices=["celery", "in-process"],
        help="default: celery when quiet, in-process with churn (see above)",
    )
    parser.add_argument(
        "--worker", action="store_true", help="the watcher's derivation in a Celery worker of its own (as deployed)"
    )
    parser.add_argument(
        "--worker-redis-dbs",
        type=int,
        nargs=2,
        default=[11, 12],
        metavar=("POLL", "WATCH"),
        help="with --worker: the Redis databases of the two queues, flushed first (default 11 12)",
    )
    parser.add_argument(
        "--tail", type=float, help="seconds at the window's end with no churn (default: two intervals and 5 s)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated stage and the processes' logs")
    args = parser.parse_args()
    scheduler = args.scheduler or ("in-process" if args.churn and not args.worker else "celery")
    if args.worker and scheduler != "celery":
        parser.error("--worker derives in Celery: it goes with --scheduler celery")
    print(json.dumps({"machine": machine(), "load_before": load()}), flush=True)
    dbs = (args.worker_redis_dbs[0], args.worker_redis_dbs[1])
    for n in args.nodes:
        result = run(n, args.minutes, args.interval, args.churn, scheduler, args.keep, args.worker, dbs, args.tail)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
