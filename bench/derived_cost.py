#!/usr/bin/env python
"""The derived layer's price and payoff: page times before/after, and what deriving costs a collection.

    .venv/bin/python bench/derived_cost.py --nodes 200 [--hours 3] [--repeat 3]
    .venv/bin/python bench/derived_cost.py --nodes 5000 --hours 1 --write-only   # the write side alone
    .venv/bin/python bench/derived_cost.py --history claimline_bench_week5k --cluster n5000 --repeat 3

Per size, in its own database (``claimline_bench_derived_<N>``, or ``--database``, recreated): ``--hours`` hourly
generations of the synthetic cluster with 1% churn, written as ``bench/week_history.py`` writes
them (the collector's normalizer and ``write_snapshot``), without deriving. Then, cold (the
per-process history cache emptied before every request, as after each new 30 s snapshot):

- before: the Pod page (a running Pod, a pending GPU Pod, a deleted incarnation), ``/api/explain``
  (running, pending) and ``/metrics``, all derived on read;
- ``rebuild-derived`` over the history (its first snapshot derives every live Pod);
- after: the same requests, now read from the layer;
- the write side: ``derive_snapshot`` of one more unchanged snapshot, and of one more generation
  (1% churn, with its queries and the objects it decoded by kind); then rendering /metrics, the
  week's review and the overview for it (each a Celery task of its own after a collection);
- a week later: the same cluster once more (the next week's first snapshot), derived, then the
  finished week's review rendered as of it (once a week, by the same task), and that week's review
  page, cold, which now loads it (``derived.past_reviews``).

With ``--history DATABASE --cluster NAME``: nothing is built. The newest snapshot of that stored (and
derived) history that changed something is derived again, ``--repeat`` times (its derivation and the
unchanged ones after it forgotten, then derived again as a collection would): what a churned
snapshot costs after all the history that database holds, to set beside the same churn after one hour.

With ``--history`` and ``--follow N``: then what a watch's derivation lane does after that history, in
that database (use a copy: it writes). The cluster's next hourly generation (1% churn, and
``--slice-changes`` node slices changed: a device taint added), written and derived, then N quiet
checkpoints 30 s apart (``write_checkpoint``, as the watcher writes them), each derived: each time the
derivation, the inventory rows' share of it, and the renderings ``render_latest`` does after it
(/metrics, the review, the overview; each skipped while the stored one stands).

With ``--history DATABASE --cluster NAME --slice-change``: one more snapshot after the newest (which
this code must have derived) that changes one device attribute of one ResourceSlice, of a pool where a
claim holds a device, derived ``--repeat`` times (forgotten between): what one slice's change re-derives.
``--node-added`` likewise adds one Node (a live one copied under a new name): what a node joining re-derives.

Prints a JSON line per measurement (seconds; medians of ``--repeat``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import load, recreate_database, setup_django, stored_objects  # noqa: E402

WEEK_START = datetime(2026, 11, 16, tzinfo=UTC)
HOUR = timedelta(hours=1)
SOURCE = "api https://10.0.0.1:6443 (kubeconfig /etc/claimline/kubeconfig)"

CHURN = 0.01


def generations(nodes: int, start: datetime, hours: int, churn: float) -> Any:
    """Generation h of the synthetic cluster, an hour apart (plain Pods left out: the collector drops them)."""
    from demo.synthetic import synthetic_cluster

    for h in range(hours):
        yield synthetic_cluster(nodes, at=start + h * HOUR, churn=churn, generation=h, interval=HOUR, pods_per_node=0)


def emit(**fields: Any) -> None:
    print(json.dumps({**fields, "load": load()}), flush=True)


def write(cluster: Any, at: Any, stored: list[Any]) -> Any:
    """A collection's write (normalized objects, every kind complete), without deriving."""
    from collector.history_writer import start_snapshot, write_snapshot
    from collector.kinds import KINDS

    snap = start_snapshot(cluster, at, SOURCE, started=at)
    write_snapshot(snap, stored, KINDS, finished=at)
    snap.refresh_from_db()
    return snap


def samples() -> dict[str, tuple[str, str]]:
    from collector.models import ObjectVersion

    rows = ObjectVersion.objects.filter(kind="Pod")
    live = rows.filter(valid_to__isnull=True, deleted=False).order_by("namespace", "name")
    gone = rows.filter(deleted=True).order_by("namespace", "name")
    pick = {
        "running": live.exclude(name__startswith="sweep-").values_list("namespace", "name").first(),
        "pending": live.filter(name__startswith="sweep-").values_list("namespace", "name").first(),
        "deleted": gone.values_list("namespace", "name").first(),
    }
    return {k: v for k, v in pick.items() if v is not None}


def timed_requests(client: Any, pods: dict[str, tuple[str, str]], repeat: int) -> dict[str, float]:
    from collector import recent_history as reading

    urls = {f"pod page, {k}": f"/c/bench/pods/{ns}/{name}/" for k, (ns, name) in pods.items()}
    urls.update(
        {
            f"api explain, {k}": f"/api/explain?cluster=bench&pod={ns}/{name}"
            for k, (ns, name) in pods.items()
            if k != "deleted"
        }
    )
    urls["metrics"] = "/metrics?cluster=bench"
    out = {}
    for label, url in urls.items():
        times = []
        for _ in range(repeat if label != "metrics" else 1):
            reading._recent.clear()
            start = time.perf_counter()
            response = client.get(url, secure=True)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, (url, response.status_code)
        out[label] = round(statistics.median(times), 3)
    return out


@contextmanager
def reads_counted() -> Iterator[dict[str, Any]]:
    """What the block read: its queries, and the objects it decoded by kind (what would grow with
    the history kept, where the Event index read every Event version: compare ``--hours``)."""
    import orjson
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    loads = orjson.loads
    decoded: Counter[str] = Counter()

    def counting(content: Any) -> Any:
        obj = loads(content)
        decoded[str(obj.get("kind")) if isinstance(obj, dict) else ""] += 1
        return obj

    out: dict[str, Any] = {}
    orjson.loads = counting  # every module calls it through the module
    try:
        with CaptureQueriesContext(connection) as queries:
            yield out
    finally:
        orjson.loads = loads
    out.update(queries=len(queries), decoded=dict(sorted(decoded.items())))


def run(nodes: int, hours: int, repeat: int, write_only: bool = False) -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from collector.history_writer import get_cluster
    from derived.rendered import render_latest_metrics
    from derived.review import render_latest_review
    from derived.writer import derive_snapshot

    cluster = get_cluster("bench")
    gens = generations(nodes, WEEK_START, hours + 1, CHURN)
    started = time.perf_counter()
    for h in range(hours):
        stored = stored_objects(next(gens))
        write(cluster, WEEK_START + h * HOUR, stored)
        write(cluster, WEEK_START + h * HOUR + timedelta(seconds=30), stored)  # unchanged
    emit(nodes=nodes, step="history written", snapshots=2 * hours, seconds=round(time.perf_counter() - started))
    User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(User.objects.get(username="bench"))
    pods = samples()
    if not write_only:
        emit(nodes=nodes, step="before (derived on read)", **timed_requests(client, pods, repeat))
    started = time.perf_counter()
    call_command("rebuild-derived", "--cluster", "bench", stdout=sys.stderr)
    emit(nodes=nodes, step="rebuild-derived", snapshots=2 * hours, seconds=round(time.perf_counter() - started, 1))
    if not write_only:
        emit(nodes=nodes, step="after (read from the layer)", **timed_requests(client, pods, repeat))
    last_at = WEEK_START + (hours - 1) * HOUR + timedelta(seconds=30)
    snap = write(cluster, last_at + timedelta(seconds=30), stored)
    start = time.perf_counter()
    result = derive_snapshot(snap)
    emit(
        nodes=nodes,
        step="derive unchanged snapshot",
        seconds=round(time.perf_counter() - start, 3),
        result=result.describe() if result else None,
    )
    churned = stored_objects(next(gens))
    snap = write(cluster, WEEK_START + hours * HOUR, churned)
    with reads_counted() as read:
        start = time.perf_counter()
        result = derive_snapshot(snap)
        seconds = round(time.perf_counter() - start, 3)
    emit(
        nodes=nodes,
        step="derive 1% churn snapshot",
        seconds=seconds,
        versions=snap.versions_written,
        deletions=snap.deletions,
        result=result.describe() if result else None,
        **read,
    )
    start = time.perf_counter()
    render_latest_metrics(snap, force=True)
    emit(nodes=nodes, step="render /metrics (its own task)", seconds=round(time.perf_counter() - start, 3))
    start = time.perf_counter()
    render_latest_review(snap, force=True)
    emit(nodes=nodes, step="render the week's review (its own task)", seconds=round(time.perf_counter() - start, 3))
    render_overview(nodes, snap)
    finished_week(client, cluster, churned, nodes, repeat, write_only)


def render_overview(nodes: int, snapshot: Any) -> None:
    """The overview rendered for the churned snapshot (its own task), where the tree has it."""
    try:
        from derived.overviews import render_latest_overview
    except ImportError:  # a tree from before the overview was rendered
        return
    start = time.perf_counter()
    render_latest_overview(snapshot, force=True)
    emit(nodes=nodes, step="render the overview (its own task)", seconds=round(time.perf_counter() - start, 3))


def finished_week(client: Any, cluster: Any, stored: list[Any], nodes: int, repeat: int, write_only: bool) -> None:
    """The next week's first snapshot (nothing changed), then the finished week's review rendered as
    of it, and the finished week's page before and after (cold: the history cache emptied)."""
    from collector import recent_history as reading
    from derived.past_reviews import render_finished_weeks
    from derived.writer import derive_snapshot

    snap = write(cluster, WEEK_START + timedelta(days=7, hours=1), stored)
    derive_snapshot(snap)
    url = f"/c/bench/review/?week={WEEK_START.date().isoformat()}"

    def page() -> float:
        times = []
        for _ in range(repeat):
            reading._recent.clear()
            start = time.perf_counter()
            response = client.get(url, secure=True)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, (url, response.status_code)
        return round(statistics.median(times), 3)

    if not write_only:
        emit(nodes=nodes, step="finished week's review page, computed (cold)", seconds=page())
    start = time.perf_counter()
    weeks = render_finished_weeks(cluster, [WEEK_START], snap.at)
    seconds = round(time.perf_counter() - start, 3)
    emit(nodes=nodes, step="render a finished week's review (once, after the next week's first snapshot)",
         seconds=seconds, weeks=len(weeks))
    if not write_only:
        emit(nodes=nodes, step="finished week's review page, stored (cold)", seconds=page())


def derived_afresh(cluster: Any, snap: Any) -> tuple[Any, float, dict[str, Any]]:
    """``snap`` derived once more, what was derived from it on forgotten first: (result, seconds, what it read)."""
    import gc

    from derived.writer import derive_snapshot, forget_from

    forget_from(cluster, snap.at)
    gc.collect()
    with reads_counted() as read:
        start = time.perf_counter()
        result = derive_snapshot(snap)
        seconds = round(time.perf_counter() - start, 3)
    return result, seconds, read


def rederive_newest_change(cluster_name: str, repeat: int) -> None:
    """The newest changed snapshot of a derived history, derived again ``repeat`` times."""

    from collector.models import Cluster, Snapshot
    from derived.writer import covered, derive_snapshot

    cluster = Cluster.objects.get(name=cluster_name)
    snapshots = Snapshot.objects.filter(cluster=cluster).order_by("-at")
    snap = next(s for s in snapshots.iterator() if s.changed)
    if not covered(snap.pk):
        raise SystemExit(f"{cluster_name} is not derived by this code up to {snap.at}: rebuild-derived it first")
    later = list(snapshots.filter(at__gt=snap.at).order_by("at"))
    history = Snapshot.objects.filter(cluster=cluster, at__lte=snap.at).count()
    for attempt in range(repeat):
        result, seconds, read = derived_afresh(cluster, snap)
        emit(step="derive the newest churned snapshot again", attempt=attempt, seconds=seconds,
             snapshots_before=history - 1, result=result.describe() if result else None, **read)
        for after in later:
            derive_snapshot(after)


def follow(cluster_name: str, checkpoints: int, slice_changes: int) -> None:
    """The next generation after a derived history, then ``checkpoints`` quiet checkpoints, as a watch's
    derivation lane derives them (``derive_snapshot``, then ``render_latest``'s renderings), timed."""
    from collector.history_writer import write_checkpoint
    from collector.models import Cluster, ObjectVersion, Snapshot
    from derived import writer
    from derived.overviews import render_latest_overview
    from derived.past_reviews import render_reviews
    from derived.rendered import render_latest_metrics

    cluster = Cluster.objects.get(name=cluster_name)
    newest = Snapshot.objects.filter(cluster=cluster).order_by("-at").values_list("at", flat=True).first()
    if newest is None:
        raise SystemExit(f"{cluster_name} has no snapshot to follow")
    nodes = ObjectVersion.objects.filter(cluster=cluster, kind="Node", valid_to__isnull=True, deleted=False).count()
    generation = int((newest - WEEK_START) / HOUR) + 1
    spent: Counter[str] = Counter()
    write_rows = writer.write_inventory_devices

    def inventory_rows(*args: Any, **kwargs: Any) -> int:
        start = time.perf_counter()
        try:
            return write_rows(*args, **kwargs)
        finally:
            spent["inventory_rows"] += time.perf_counter() - start

    def derived(snapshot: Any, step: str) -> None:
        spent.clear()
        start = time.perf_counter()
        result = writer.derive_snapshot(snapshot)
        derive_s = time.perf_counter() - start
        renders: dict[str, float] = {}
        rendered = []  # the renderings done; the others found the stored one standing
        for what, render in (("metrics", render_latest_metrics), ("review", render_reviews),
                             ("overview", render_latest_overview)):
            start = time.perf_counter()
            if render(snapshot):
                rendered.append(what)
            renders[f"render_{what}_s"] = round(time.perf_counter() - start, 3)
        emit(nodes=nodes, step=step, derive_s=round(derive_s, 3), inventory_rows_s=round(spent["inventory_rows"], 3),
             render_s=round(sum(renders.values()), 3), rendered=rendered, versions=snapshot.versions_written,
             deletions=snapshot.deletions, result=result.describe() if result else None, **renders)

    writer.write_inventory_devices = inventory_rows  # type: ignore[assignment]  # timed where derive_snapshot calls it
    try:
        objects = list(generations(nodes, WEEK_START, generation + 1, CHURN))[-1]
        changed = 0
        for obj in objects:
            if obj["kind"] == "ResourceSlice" and changed < slice_changes:
                first, *rest = obj["spec"]["devices"]
                taints = [{"key": "bench.claimline/maintenance", "effect": "NoSchedule"}]
                obj["spec"] = {**obj["spec"], "devices": [{**first, "taints": taints}, *rest]}
                changed += 1
        at = WEEK_START + generation * HOUR
        derived(write(cluster, at, stored_objects(objects)), f"churned snapshot ({changed} slices changed)")
        for k in range(1, checkpoints + 1):
            quiet = write_checkpoint(cluster, at + timedelta(seconds=30 * k), SOURCE, 0)
            derived(quiet, "quiet checkpoint")
    finally:
        writer.write_inventory_devices = write_rows  # type: ignore[assignment]


def derive_one_slice_change(cluster_name: str, repeat: int) -> None:
    """A snapshot after the newest derived one that changes one held pool's slice, derived ``repeat`` times."""

    import orjson

    from collector.models import ObjectVersion
    from derived.models import AllocationSpan

    cluster, newest = newest_derived(cluster_name)
    held = AllocationSpan.objects.filter(cluster=cluster, end__isnull=True).order_by("driver", "pool")
    driver, pool = held.values_list("driver", "pool").first() or ("", "")
    live = ObjectVersion.objects.filter(cluster=cluster, kind="ResourceSlice", valid_to__isnull=True, deleted=False)
    for content in live.values_list("content", flat=True).iterator(200):
        obj = orjson.loads(content)
        spec = obj.get("spec") or {}
        if spec.get("driver") == driver and (spec.get("pool") or {}).get("name") == pool and spec.get("devices"):
            break
    else:
        raise SystemExit(f"no live slice of the held pool {driver}/{pool}")
    device = spec["devices"][0]
    device.setdefault("attributes", {})["benchChanged"] = {"string": newest.at.isoformat()}  # one attribute
    derive_one_change(cluster, newest, "ResourceSlice", obj, "derive one slice change", repeat, pool=f"{driver}/{pool}")


def derive_one_node_added(cluster_name: str, repeat: int) -> None:
    """A snapshot after the newest derived one that adds a Node (as an autoscaler does: a copy of a live
    one under a new name and UID), derived ``repeat`` times."""
    import orjson

    from collector.models import ObjectVersion

    cluster, newest = newest_derived(cluster_name)
    live = ObjectVersion.objects.filter(cluster=cluster, kind="Node", valid_to__isnull=True, deleted=False)
    content = live.order_by("name").values_list("content", flat=True).first()
    if content is None:
        raise SystemExit(f"{cluster_name} has no live Node to copy")
    obj = orjson.loads(content)
    name = f"bench-added-{int(newest.at.timestamp())}"
    obj["metadata"] |= {"name": name, "uid": f"bench-node-{int(newest.at.timestamp())}"}
    labels = obj["metadata"].get("labels") or {}
    if "kubernetes.io/hostname" in labels:
        labels["kubernetes.io/hostname"] = name
    derive_one_change(cluster, newest, "Node", obj, "derive one node added", repeat, node=name)


def newest_derived(cluster_name: str) -> tuple[Any, Any]:
    from collector.models import Cluster, Snapshot
    from derived.writer import covered

    cluster = Cluster.objects.get(name=cluster_name)
    newest = Snapshot.objects.filter(cluster=cluster).order_by("-at").first()
    if newest is None or not covered(newest.pk):
        raise SystemExit(f"{cluster_name}'s newest snapshot is not derived by this code: rebuild-derived it first")
    return cluster, newest


def derive_one_change(cluster: Any, newest: Any, kind: str, obj: Any, step: str, repeat: int, **about: Any) -> None:
    """``obj`` written as the only change of a snapshot 30 s after ``newest``, derived ``repeat`` times."""
    from collector.history_writer import start_snapshot, write_snapshot
    from collector.normalize import normalize

    at = newest.at + timedelta(seconds=30)
    snap = start_snapshot(cluster, at, SOURCE, started=at)
    write_snapshot(snap, [normalize(kind, obj)], (), finished=at)  # no kind complete: the rest stays
    snap.refresh_from_db()
    for attempt in range(repeat):
        result, seconds, read = derived_afresh(cluster, snap)
        emit(
            step=step,
            attempt=attempt,
            seconds=seconds,
            pods_derived=result.pods_derived if result else None,
            result=result.describe() if result else None,
            **about,
            **read,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200, help="one size per run (Django is set up once)")
    parser.add_argument("--hours", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-only", action="store_true", help="only the write side: no page timings")
    parser.add_argument("--history", help="a database holding a derived history (nothing is built)")
    parser.add_argument("--cluster", default="n5000", help="with --history: the cluster to derive again")
    parser.add_argument("--slice-change", action="store_true", help="with --history: derive one slice's change")
    parser.add_argument("--node-added", action="store_true", help="with --history: derive one Node added")
    parser.add_argument("--database", help="the database to build in (default claimline_bench_derived_<N>)")
    parser.add_argument("--follow", type=int, default=0, metavar="N",
                        help="with --history: then derive the next generation and N quiet checkpoints (writes)")
    parser.add_argument("--slice-changes", type=int, default=1,
                        help="with --follow: how many node slices the generation changes")
    args = parser.parse_args()
    if args.history:
        from bench._common import open_database

        open_database(args.history, reuse=True)
        logging.getLogger("claimline").setLevel(logging.WARNING)
        if args.slice_change:
            derive_one_slice_change(args.cluster, args.repeat)
            return
        if args.node_added:
            derive_one_node_added(args.cluster, args.repeat)
            return
        rederive_newest_change(args.cluster, args.repeat)
        if args.follow:
            follow(args.cluster, args.follow, args.slice_changes)
        return
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ["CLAIMLINE_CLUSTERS"] = "bench=in-cluster"
    url = recreate_database(args.database or f"claimline_bench_derived_{args.nodes}")
    setup_django(url)
    logging.getLogger("claimline").setLevel(logging.WARNING)
    run(args.nodes, args.hours, args.repeat, args.write_only)


if __name__ == "__main__":
    main()
