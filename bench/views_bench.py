#!/usr/bin/env python
"""Server time of every page, API and report at two cluster sizes, and how it grows between them.

    .venv/bin/python bench/views_bench.py                     # 200 and 2,000 nodes, 3 hours of history each
    .venv/bin/python bench/views_bench.py --nodes 200 2000 --hours 3 --iterations 10 --heavy-iterations 3
    .venv/bin/python bench/views_bench.py --reuse ...         # measure again over the clusters built last time
    .venv/bin/python bench/views_bench.py --reuse --derive ... # the same, read from the derived layer

For each size N it builds cluster ``nN`` in one database (``claimline_bench_views``): ``--hours``
hours of the synthetic cluster (``demo/synthetic.py``) with 1% hourly churn, written through the
collector's filters, normalizer and snapshot writer exactly as ``week_history.py`` writes a week
(so there are churned claims and deleted Pod incarnations), from Monday 2026-11-16 00:00 UTC.

Requests go through Django's test ``Client`` in this process (URL routing, middleware with
sign-in, the view, template rendering; no network), as a platform admin unless the row says
team member (a user whose group is granted the busiest namespace: scope and redaction apply).
``explain (CLI --json)`` is ``manage.py explain --json`` called in process.

Each endpoint gets one cold request, with the per-process history cache (``collector/recent_history.py``)
emptied first so it pays for loading the snapshot's history, and with its SQL query count; then N
timed requests over a seeded sample of objects (median and p95). A request slower than
``--timeout`` is reported as timed out; when the cold request takes more than half of it, the
repeated ones are skipped.

Last, a past week's review and its CSV: one more snapshot of each cluster (nothing changed) a week
after its history began, so the built week has ended; with ``--derive`` it is derived as a collection
would (``derive_backlog``: the finished week's review rendered once as of it, ``derived.past_reviews``),
its cost printed; then the built week's review and CSV are measured as of it like every other row
(cold, then warm). The snapshot, and what was derived from it, is removed afterwards and the current
week's renderings restored, so a ``--reuse`` run measures the same history.

Endpoints are measured one after the other, each at every size back to back (the load of a
shared machine drifts over minutes; a row's sizes see about the same). Prints a JSON line per
(endpoint, size), then a table: per endpoint the cold/p50/p95 at each size
and the growth factor of each between the two sizes. The sizes differ 10× by default, so a row that
grows ~10× is linear in the cluster and one that grows ~100× is quadratic.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (  # noqa: E402
    load,
    machine,
    median,
    open_database,
    percentile,
)

DATABASE = "claimline_bench_views"
MATCH_EXPRESSION = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0"
WEEK = "2026-11-16"


def cluster_name(nodes: int) -> str:
    return f"n{nodes}"


def build(sizes: list[int], hours: int, churn: float) -> list[dict[str, Any]]:
    from bench.week_history import write_hours

    built = []
    for nodes in sizes:
        started = time.perf_counter()
        totals: dict[str, int] = {}
        for _h, written in write_hours(cluster_name(nodes), nodes, hours, churn, interval=30):
            totals = written
        built.append({"built": cluster_name(nodes), "nodes": nodes, "hours": hours, **totals,
                      "build_s": round(time.perf_counter() - started, 1), "load": load()})
        print(json.dumps(built[-1]), flush=True)
    return built


def derive(clusters: list[str]) -> None:
    """``rebuild-derived`` each cluster (a no-op for snapshots derived already), so pages read the layer."""
    from django.core.management import call_command

    for name in clusters:
        started = time.perf_counter()
        call_command("rebuild-derived", "--cluster", name, stdout=io.StringIO())
        print(json.dumps({"derived": name, "rebuild_s": round(time.perf_counter() - started, 1), "load": load()}),
              flush=True)


def analyze() -> None:
    """Refresh the planner's statistics, as autovacuum does on a running install: right after a
    bulk build they describe empty tables, and a plan chosen for an empty table can scan a large one."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE")


# --- what to ask for --------------------------------------------------------------------------------


def samples(cluster: str, rng: random.Random, per_kind: int) -> dict[str, list[Any]]:
    from django.db.models import Count

    from collector.models import ObjectVersion, Snapshot
    from collector.recent_history import open_history
    from derived.models import DOMAIN_VERSION, DerivedSnapshot
    from domain.cluster.timefmt import rfc3339
    from domain.inventory.devices import device_holders

    rows = ObjectVersion.objects.filter(cluster__name=cluster)

    def pick(qs: Any, n: int) -> list[Any]:
        # Ordered, then sampled with a seed: the same objects on every run.
        items = list(qs)
        return rng.sample(items, min(n, len(items)))

    live_claims = rows.filter(kind="ResourceClaim", valid_to__isnull=True, deleted=False)
    churned_claims = (
        rows.filter(kind="ResourceClaim").values("uid").annotate(n=Count("id")).filter(n__gt=1)
        .order_by("uid").values_list("uid", flat=True)
    )
    claims = pick(live_claims.order_by("uid").values_list("uid", flat=True), per_kind) + pick(
        churned_claims, per_kind
    )
    live_pods = rows.filter(kind="Pod", valid_to__isnull=True, deleted=False)
    running = pick(
        live_pods.exclude(name__startswith="sweep-").order_by("namespace", "name").values_list("namespace", "name"),
        per_kind,
    )
    pending = pick(
        live_pods.filter(name__startswith="sweep-").order_by("namespace", "name").values_list("namespace", "name"),
        max(2, per_kind // 4),
    )
    deleted = pick(
        rows.filter(kind="Pod", deleted=True).order_by("namespace", "name").values_list("namespace", "name"),
        per_kind,
    )
    # Held devices: their pages list holders and preparation failures.
    holders = device_holders(open_history(cluster, None).state)
    devices = pick(sorted(holders), per_kind)
    # Earlier snapshots, for the overview as of them (only the newest is rendered): the derived ones when
    # there are (``--derive``), whose overview reads the layer; else any.
    derived = DerivedSnapshot.objects.filter(cluster__name=cluster, version=DOMAIN_VERSION)
    snapshots = derived if derived.count() > 1 else Snapshot.objects.usable().filter(cluster__name=cluster)
    earlier = pick([rfc3339(at) for at in snapshots.order_by("-at").values_list("at", flat=True)[1:]], per_kind)
    return {
        "claims": claims, "running": running, "pending": pending, "deleted": deleted, "devices": devices,
        "earlier": earlier,
    }


def clients() -> tuple[Any, Any]:
    """A platform admin, and a member of a team granted each cluster's busiest namespace (redaction applies)."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    admin_user, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_superuser": True})
    member_user, _ = User.objects.get_or_create(username="bench-member")
    team, _ = Group.objects.get_or_create(name="bench-team")
    member_user.groups.add(team)
    admin, member = Client(), Client()
    admin.force_login(admin_user)
    member.force_login(member_user)
    return admin, member


def team_namespace(cluster: str) -> str:
    from django.contrib.auth.models import Group
    from django.db.models import Count

    from access.models import NamespaceGrant
    from collector.models import Cluster, ObjectVersion

    namespace = str(
        ObjectVersion.objects.filter(cluster__name=cluster, kind="Pod", valid_to__isnull=True, deleted=False)
        .values("namespace").annotate(n=Count("id")).order_by("-n", "namespace").values_list("namespace", flat=True)
        .first()
    )
    NamespaceGrant.objects.get_or_create(
        group=Group.objects.get(name="bench-team"), namespace=namespace, cluster=Cluster.objects.get(name=cluster)
    )
    return namespace


def member_samples(cluster: str, namespace: str, n: int) -> tuple[list[str], list[tuple[str, str]]]:
    from collector.models import ObjectVersion

    live = ObjectVersion.objects.filter(
        cluster__name=cluster, namespace=namespace, valid_to__isnull=True, deleted=False
    )
    claims = list(live.filter(kind="ResourceClaim").order_by("uid").values_list("uid", flat=True)[:n])
    pods = list(
        live.filter(kind="Pod").exclude(name__startswith="sweep-").order_by("name")
        .values_list("namespace", "name")[:n]
    )
    return claims, pods


Fetch = Callable[[str], tuple[int, int]]  # target -> (HTTP status, response bytes)


def http(client: Any) -> Fetch:
    def get(url: str) -> tuple[int, int]:
        response = client.get(url, secure=True)
        return response.status_code, len(response.content)

    return get


CHANGED_ROWS = 16  # two nodes' GPUs: the rows a slice change on two nodes writes
CHANGED_SPANS = 16  # the spans of 16 one-GPU claims allocated or released


class SnapshotFirst:
    """A Fetch whose every request is a snapshot's first in a process that has read the cluster's
    devices before: ``prepare`` (untimed) reads them if this process has not, empties the history
    cache, and rewrites ``devices`` device rows and ``spans`` held allocation spans as the derivation
    writes a change: the same content in new rows (a changed device's or claim's row is closed and a new
    one written; here the old one is deleted, so the history stays the one built). The request then
    decodes those devices and judges them afresh, and chooses those devices' holders again, as after a
    slice change (and claims allocated or released) on two nodes; the rest is carried from the last
    answer. The rewritten rows are the oldest, so each request rewrites others."""

    def __init__(self, fetch: Fetch, cluster: str, devices: int, spans: int = 0) -> None:
        self.fetch, self.cluster, self.devices, self.spans = fetch, cluster, devices, spans

    def prepare(self, target: str) -> None:
        from django.db import transaction

        from collector import recent_history as reading
        from collector.models import Cluster
        from derived import match_stock
        from derived.models import AllocationSpan, InventoryDevice

        pk = Cluster.objects.get(name=self.cluster).pk
        if pk not in match_stock._LAST:
            self.fetch(target)
        reading._recent.clear()
        open_rows = [(InventoryDevice, self.devices, {"valid_to__isnull": True}),
                     (AllocationSpan, self.spans, {"end__isnull": True})]
        with transaction.atomic():
            for model, count, still_open in open_rows:
                rows = list(model.objects.filter(cluster_id=pk, **still_open).order_by("pk")[:count])
                model.objects.filter(pk__in=[row.pk for row in rows]).delete()
                for row in rows:
                    row.pk = None
                model.objects.bulk_create(rows)

    def __call__(self, target: str) -> tuple[int, int]:
        return self.fetch(target)


def explain_cli(cluster: str) -> Fetch:
    from django.core.management import call_command

    def run(pod: str) -> tuple[int, int]:
        out = io.StringIO()
        call_command("explain", pod, "--json", "--cluster", cluster, stdout=out)
        return 200, len(out.getvalue())

    return run


def endpoints(cluster: str, picked: dict[str, list[Any]], member_claims: list[str],
              member_pods: list[tuple[str, str]], admin: Fetch, member: Fetch,
              iterations: int, heavy: int) -> list[tuple[str, Fetch, list[str], int]]:
    from django.urls import reverse

    c = cluster
    claim_urls = [reverse("claim", args=[c, uid]) for uid in picked["claims"]]
    running = [reverse("pod", args=[c, ns, n]) for ns, n in picked["running"]]
    pending = [reverse("pod", args=[c, ns, n]) for ns, n in picked["pending"]]
    deleted = [reverse("pod", args=[c, ns, n]) for ns, n in picked["deleted"]]
    return [
        ("fleet home page", admin, [reverse("home")], heavy),
        ("cluster overview", admin, [reverse("overview", args=[c])], heavy),
        ("cluster overview (team member)", member, [reverse("overview", args=[c])], heavy),
        ("cluster overview as of an earlier snapshot", admin,
         [reverse("overview", args=[c]) + f"?as_of={quote(at)}" for at in picked["earlier"]], heavy),
        ("claims list", admin, [reverse("claims", args=[c])], heavy),
        ("claims list (team member)", member, [reverse("claims", args=[c])], heavy),
        ("claims (api)", admin, [f"/api/claims?cluster={c}"], heavy),
        ("claims (api, a page of 500)", admin, [f"/api/claims?cluster={c}&limit=500"], heavy),
        ("claim page", admin, claim_urls, iterations),
        ("claim page (team member)", member, [reverse("claim", args=[c, uid]) for uid in member_claims], iterations),
        ("pod page (running)", admin, running, iterations),
        ("pod page (pending: checks every device)", admin, pending, heavy),
        ("pod page (deleted incarnation)", admin, deleted, iterations),
        ("pod page (team member, running)", member,
         [reverse("pod", args=[c, ns, n]) for ns, n in member_pods], iterations),
        ("explain (CLI --json, running pod)", explain_cli(c), [f"{ns}/{n}" for ns, n in picked["running"]],
         iterations),
        ("explain (api, running pod)", admin, [f"/api/explain?cluster={c}&pod={ns}/{n}" for ns, n in picked["running"]],
         iterations),
        ("explain (api, pending pod)", admin, [f"/api/explain?cluster={c}&pod={ns}/{n}" for ns, n in picked["pending"]],
         heavy),
        ("leaks page", admin, [reverse("leaks", args=[c])], heavy),
        ("leaks (api)", admin, [f"/api/leaks?cluster={c}"], heavy),
        ("audit page", admin, [reverse("audit", args=[c])], heavy),
        ("audit (api)", admin, [f"/api/audit?cluster={c}"], heavy),
        ("weekly review", admin, [reverse("review", args=[c]) + f"?week={WEEK}"], heavy),
        ("weekly review CSV", admin, [reverse("review-csv", args=[c]) + f"?week={WEEK}"], heavy),
        # No rendering stands for an earlier snapshot of the current week: computed from the spans.
        ("weekly review as of an earlier snapshot", admin,
         [reverse("review", args=[c]) + f"?week={WEEK}&as_of={quote(at)}" for at in picked["earlier"]], heavy),
        ("metrics", admin, [f"/metrics?cluster={c}"], heavy),
        ("inventory page", admin, [reverse("inventory", args=[c])], heavy),
        ("device classes page", admin, [reverse("classes", args=[c])], heavy),
        ("device page", admin, [reverse("device", args=[c, *d]) for d in picked["devices"]], iterations),
        ("match-devices (api, all devices)", admin,
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"], heavy),
        # The same answer for a process that has read the cluster's devices before (the row above): a new
        # snapshot whose device rows are the same, one after a slice change rewrote two nodes' rows, and
        # one after that and 16 claims' spans.
        # Each request, the repeats too, is a snapshot's first (``SnapshotFirst``).
        ("match-devices (api, all devices, a snapshot's first request)", SnapshotFirst(admin, c, 0),
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"], heavy),
        ("match-devices (api, all devices, after a slice change)", SnapshotFirst(admin, c, CHANGED_ROWS),
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"], heavy),
        ("match-devices (api, all devices, after slices and claims change)",
         SnapshotFirst(admin, c, CHANGED_ROWS, CHANGED_SPANS),
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"], heavy),
        ("match-devices (api, a page of 500)", admin,
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}&limit=500"], heavy),
        ("selector playground (a page of 1,000 devices)", admin,
         [reverse("playground", args=[c]) + f"?class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"], heavy),
        ("notices page", admin, [reverse("notices", args=[c])], iterations),
        ("snapshots page", admin, [reverse("snapshots", args=[c])], iterations),
        ("snapshots (api)", admin, [f"/api/snapshots?cluster={c}"], iterations),
    ]


# --- timing ------------------------------------------------------------------------------------------


class RequestTimeout(BaseException):  # not Exception: the domain catches those per device
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise RequestTimeout


def measure(fetch: Fetch, name: str, targets: list[str], iterations: int, timeout: int) -> dict[str, Any]:
    try:
        return _measure(fetch, name, targets, iterations, timeout)
    except RequestTimeout:
        return {"endpoint": name, "example": targets[0], "timed_out_after_s": timeout, "load": load()}
    finally:
        signal.alarm(0)


def _measure(fetch: Fetch, name: str, targets: list[str], iterations: int, timeout: int) -> dict[str, Any]:
    from django.db import connection

    from collector import recent_history as reading

    queries = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    reading._recent.clear()  # cold: this endpoint pays for loading the snapshot's history
    prepare = getattr(fetch, "prepare", None)  # untimed, before each request (``SnapshotFirst``)
    if prepare is not None:
        prepare(targets[0])
    # An execute wrapper, not CaptureQueriesContext: request_started resets the query log mid-capture.
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    with connection.execute_wrapper(count):
        start = time.perf_counter()
        status, _size = fetch(targets[0])
        cold = time.perf_counter() - start
    if status != 200:
        raise RuntimeError(f"{name}: {targets[0]} answered {status}")
    times, sizes = [], []
    # Requests slower than the timeout are reported as such rather than awaited for hours.
    for i in range(iterations if cold < timeout / 2 else 0):
        target = targets[i % len(targets)]
        if prepare is not None:
            prepare(target)
        signal.alarm(timeout)
        start = time.perf_counter()
        status, size = fetch(target)
        times.append(time.perf_counter() - start)
        if status != 200:
            raise RuntimeError(f"{name}: {target} answered {status}")
        sizes.append(size)
    return {
        "endpoint": name,
        "example": targets[0],
        "n": len(times),
        "distinct": min(len(targets), len(times)),
        "cold_ms": round(cold * 1000, 1),
        "p50_ms": round(median(times) * 1000, 1) if times else None,
        "p95_ms": round(percentile(times, 95) * 1000, 1) if times else None,
        "max_ms": round(max(times) * 1000, 1) if times else None,
        "queries": queries,
        "response_kb": round(sum(sizes) / len(sizes) / 1024, 1) if sizes else None,
        "load": load(),
    }


def plan(nodes: int, args: argparse.Namespace, admin: Any, member: Any) -> list[tuple[str, Fetch, list[str], int]]:
    cluster = cluster_name(nodes)
    rng = random.Random(20261116)
    picked = samples(cluster, rng, per_kind=max(args.iterations, 4))
    namespace = team_namespace(cluster)
    member_claims, member_pods = member_samples(cluster, namespace, args.iterations)
    return endpoints(cluster, picked, member_claims, member_pods, http(admin), http(member),
                     args.iterations, args.heavy_iterations)


def measure_all(sizes: list[int], args: argparse.Namespace, admin: Any, member: Any) -> list[dict[str, Any]]:
    """Each endpoint at every size, one size right after the other.

    On a machine shared with other jobs the load drifts over minutes; measuring a row's
    sizes back to back keeps its growth factor about the code rather than the drift.
    """
    plans = {nodes: plan(nodes, args, admin, member) for nodes in sizes}
    results = []
    for i, (name, *_rest) in enumerate(plans[sizes[0]]):
        if args.only and name not in args.only:
            continue
        for nodes in sizes:
            _name, fetch, targets, n = plans[nodes][i]
            if not targets:
                row: dict[str, Any] = {"endpoint": name, "skipped": "nothing to sample"}
            else:
                row = measure(fetch, name, targets, n, args.timeout)
            row = {"nodes": nodes, **row}
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


PAST_WEEK_ENDPOINTS = ("weekly review (past week)", "weekly review CSV (past week)")


def measure_past_week(sizes: list[int], args: argparse.Namespace, admin: Any) -> list[dict[str, Any]]:
    """The built week's review and CSV once the week has ended (see the module docstring)."""
    from django.urls import reverse

    from collector.models import Cluster

    names = [name for name in PAST_WEEK_ENDPOINTS if not args.only or name in args.only]
    if not names:
        return []
    added = [_next_week_snapshot(Cluster.objects.get(name=cluster_name(n)), args.derive) for n in sizes]
    results = []
    try:
        for name in names:
            view = "review" if name == PAST_WEEK_ENDPOINTS[0] else "review-csv"
            for nodes in sizes:
                url = reverse(view, args=[cluster_name(nodes)]) + f"?week={WEEK}"
                row = {"nodes": nodes, **measure(http(admin), name, [url], args.heavy_iterations, args.timeout)}
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for snapshot in added:
            _remove(snapshot, args.derive)
    return results


def _next_week_snapshot(cluster: Any, derive: bool) -> Any:
    """An unchanged snapshot a week after the history began, derived as a collection would when ``derive``."""
    from datetime import timedelta

    from bench.week_history import SOURCE, WEEK_START
    from collector.models import Snapshot
    from derived.pipeline import derive_backlog

    last = Snapshot.objects.filter(cluster=cluster).order_by("-at").first()
    at = WEEK_START + timedelta(days=7, hours=1)
    snapshot = Snapshot.objects.create(
        cluster=cluster, at=at, started=at, finished=at + timedelta(seconds=4), source=SOURCE,
        status=Snapshot.Status.OK, objects_seen=last.objects_seen if last else 0,
    )
    if derive:
        started = time.perf_counter()
        derive_backlog(cluster.pk)
        seconds = round(time.perf_counter() - started, 2)
        step = "derive the next week's first snapshot, render the finished week's and the new week's reviews"
        print(json.dumps({"past_week": cluster.name, "step": step, "seconds": seconds, "load": load()}), flush=True)
    return snapshot


def _remove(snapshot: Any, derive: bool) -> None:
    """Drop the added snapshot and what was derived from it; render the newest remaining one's week again."""
    from collector.models import Snapshot
    from derived.pipeline import render_latest
    from derived.writer import forget_from

    forget_from(snapshot.cluster, snapshot.at)
    snapshot.delete()
    newest = Snapshot.objects.filter(cluster=snapshot.cluster).order_by("-at").first()
    if derive and newest is not None:
        render_latest(newest, force=True)


# --- the growth table ------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def _growth(small: float | None, big: float | None) -> str:
    if small is None or big is None or small <= 0:
        return "–"
    return f"{big / small:.1f}×"


def _cell(row: dict[str, Any] | None, key: str) -> str:
    if row is None or "skipped" in row:
        return "–"
    if "timed_out_after_s" in row:
        return f"> {row['timed_out_after_s']} s" if key == "cold_ms" else "–"
    return _ms(row.get(key))


def table(sizes: list[int], rows: list[dict[str, Any]]) -> str:
    """Markdown: cold, p50, p95 at each size, then growth of cold and p50 from the first size to the last."""
    by = {(r["nodes"], r["endpoint"]): r for r in rows}
    names = list(dict.fromkeys(r["endpoint"] for r in rows))
    small, big = sizes[0], sizes[-1]
    head = ["endpoint"]
    for n in sizes:
        head += [f"{n} cold", f"{n} p50", f"{n} p95"]
    head += [f"growth cold {small}→{big}", "growth p50", "queries"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [name]
        for n in sizes:
            row = by.get((n, name))
            cells += [_cell(row, "cold_ms"), _cell(row, "p50_ms"), _cell(row, "p95_ms")]
        a, b = by.get((small, name)) or {}, by.get((big, name)) or {}
        cells += [
            _growth(a.get("cold_ms"), b.get("cold_ms")),
            _growth(a.get("p50_ms"), b.get("p50_ms")),
            " / ".join(str(by.get((n, name), {}).get("queries", "–")) for n in sizes),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 2000], help="cluster sizes (smallest first)")
    parser.add_argument("--hours", type=int, default=3, help="hours of history per cluster")
    parser.add_argument("--churn", type=float, default=0.01, help="fraction of workload units changed per hour")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--reuse", action="store_true", help="measure the clusters a previous run built")
    parser.add_argument("--iterations", type=int, default=10, help="requests per page endpoint")
    parser.add_argument("--heavy-iterations", type=int, default=3, help="for lists, reports, metrics")
    parser.add_argument("--only", nargs="*", help="endpoint names to run")
    parser.add_argument("--derive", action="store_true",
                        help="rebuild-derived every cluster first: pages read the derived layer where it has rows")
    parser.add_argument("--timeout", type=int, default=300, help="seconds before a request is reported as timed out")
    args = parser.parse_args()
    sizes = sorted(set(args.nodes))
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ["CLAIMLINE_CLUSTERS"] = ",".join(f"{cluster_name(n)}=in-cluster" for n in sizes)
    os.environ.setdefault("CLAIMLINE_HISTORY_CACHE", "2")
    open_database(args.database, reuse=args.reuse)
    print(json.dumps({"machine": machine(), "load_before": load(), "database": args.database, "sizes": sizes,
                      "hours": args.hours}), flush=True)
    if not args.reuse:
        build(sizes, args.hours, args.churn)
    else:
        from collector.models import Cluster

        missing = [n for n in sizes if not Cluster.objects.filter(name=cluster_name(n)).exists()]
        if missing:
            raise SystemExit(f"{args.database} has no cluster for {missing} nodes: run without --reuse")
    if args.derive:
        derive([cluster_name(n) for n in sizes])
    analyze()
    admin, member = clients()
    rows = measure_all(sizes, args, admin, member)
    rows += measure_past_week(sizes, args, admin)
    print(table(sizes, rows), flush=True)


if __name__ == "__main__":
    main()
