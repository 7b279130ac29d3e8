#!/usr/bin/env python
"""Server time of the pages and reports over a week of a 2,000-node cluster's history.

    .venv/bin/python bench/week_history.py            # once: builds claimline_bench_week
    .venv/bin/python bench/views_bench.py [--iterations 20] [--heavy-iterations 5] [--database claimline_bench_week]

Requests go through Django's test ``Client`` in this process (URL routing, middleware, the view,
template rendering; no network, no gunicorn). Every request opens history afresh, as a real
one does. Each endpoint gets one cold request (counted apart, with its SQL query count), then
N timed ones over a seeded sample of objects: claims and Pods that are live, churned or
deleted, and the pending Pods whose explanation checks every device.

Prints a JSON line per endpoint: p50/p95/max in ms, the cold time, queries, response size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import PG_BASE, database_exists, load, machine, percentile, setup_django  # noqa: E402

CLUSTER = "week"
MATCH_EXPRESSION = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0"


def samples(rng: random.Random, per_kind: int) -> dict[str, list[Any]]:
    from django.db.models import Count

    from collector.models import Cluster, ObjectVersion

    cluster = Cluster.objects.get(name=CLUSTER)
    rows = ObjectVersion.objects.filter(cluster=cluster)

    def pick(qs: Any, n: int) -> list[Any]:
        # Ordered, then sampled with a seed: the same objects on every run.
        items = list(qs)
        return rng.sample(items, min(n, len(items)))

    live_claims = rows.filter(kind="ResourceClaim", valid_to__isnull=True, deleted=False)
    claims = (
        pick(live_claims.order_by("uid").values_list("uid", flat=True), per_kind)
        + pick(
            rows.filter(kind="ResourceClaim")
            .values("uid")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .order_by("uid")
            .values_list("uid", flat=True),
            per_kind,
        )
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
    return {"claims": claims, "running": running, "pending": pending, "deleted": deleted}


def clients() -> tuple[Any, Any, str]:
    """A platform admin, and a member of a team granted the busiest namespace (redaction applies)."""
    from django.contrib.auth.models import Group, User
    from django.db.models import Count
    from django.test import Client

    from collector.models import ObjectVersion
    from dashboard.models import NamespaceGrant

    admin_user, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_superuser": True})
    member_user, _ = User.objects.get_or_create(username="bench-member")
    team, _ = Group.objects.get_or_create(name="bench-team")
    member_user.groups.add(team)
    namespace = (
        ObjectVersion.objects.filter(cluster__name=CLUSTER, kind="Pod", valid_to__isnull=True, deleted=False)
        .values("namespace").annotate(n=Count("id")).order_by("-n", "namespace").values_list("namespace", flat=True)
        .first()
    )
    NamespaceGrant.objects.get_or_create(group=team, namespace=namespace)
    admin, member = Client(), Client()
    admin.force_login(admin_user)
    member.force_login(member_user)
    return admin, member, str(namespace)


def member_samples(namespace: str, n: int) -> tuple[list[str], list[tuple[str, str]]]:
    from collector.models import ObjectVersion

    live = ObjectVersion.objects.filter(
        cluster__name=CLUSTER, namespace=namespace, valid_to__isnull=True, deleted=False
    )
    claims = list(live.filter(kind="ResourceClaim").order_by("uid").values_list("uid", flat=True)[:n])
    pods = list(
        live.filter(kind="Pod").exclude(name__startswith="sweep-").order_by("name")
        .values_list("namespace", "name")[:n]
    )
    return claims, pods


class RequestTimeout(BaseException):  # not Exception: the domain catches those per device
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise RequestTimeout


def measure(client: Any, name: str, urls: list[str], iterations: int, timeout: int) -> dict[str, Any]:
    try:
        return _measure(client, name, urls, iterations, timeout)
    except RequestTimeout:
        return {"endpoint": name, "example": urls[0], "timed_out_after_s": timeout, "load": load()}
    finally:
        signal.alarm(0)


def _measure(client: Any, name: str, urls: list[str], iterations: int, timeout: int) -> dict[str, Any]:
    from django.db import connection

    queries = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    # An execute wrapper, not CaptureQueriesContext: request_started resets the query log mid-capture.
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    with connection.execute_wrapper(count):
        start = time.perf_counter()
        response = client.get(urls[0], secure=True)
        cold = time.perf_counter() - start
    if response.status_code != 200:
        raise RuntimeError(f"{name}: {urls[0]} answered {response.status_code}: {response.content[:500]!r}")
    times, sizes = [], []
    # Requests slower than the timeout are reported as such rather than awaited for hours.
    for i in range(iterations if cold < timeout / 2 else 0):
        url = urls[i % len(urls)]
        start = time.perf_counter()
        response = client.get(url, secure=True)
        times.append(time.perf_counter() - start)
        signal.alarm(timeout)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: {url} answered {response.status_code}")
        sizes.append(len(response.content))
    return {
        "endpoint": name,
        "example": urls[0],
        "n": len(times),
        "distinct_urls": min(len(urls), len(times)),
        "p50_ms": round(percentile(times, 50) * 1000) if times else None,
        "p95_ms": round(percentile(times, 95) * 1000) if times else None,
        "max_ms": round(max(times) * 1000) if times else None,
        "cold_ms": round(cold * 1000),
        "queries": queries,
        "response_kb": round(sum(sizes) / len(sizes) / 1024) if sizes else None,
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", default="claimline_bench_week")
    parser.add_argument("--iterations", type=int, default=20, help="requests per page endpoint")
    parser.add_argument("--heavy-iterations", type=int, default=5, help="for the claims list, review, metrics")
    parser.add_argument("--only", nargs="*", help="endpoint names to run")
    parser.add_argument("--timeout", type=int, default=300, help="seconds before a request is reported as timed out")
    args = parser.parse_args()
    if not database_exists(args.database):
        raise SystemExit(f"no database {args.database}: run bench/week_history.py first")
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ["CLAIMLINE_CLUSTERS"] = f"{CLUSTER}=in-cluster"
    setup_django(f"{PG_BASE}/{args.database}")
    from django.urls import reverse

    rng = random.Random(20261116)
    picked = samples(rng, per_kind=max(args.iterations, 4))
    admin, member, team_ns = clients()
    member_claims, member_pods = member_samples(team_ns, args.iterations)
    client = admin
    c = CLUSTER
    endpoints: list[tuple[str, list[str], int]] = [
        ("claim page", [reverse("claim", args=[c, uid]) for uid in picked["claims"]], args.iterations),
        ("pod page (running)", [reverse("pod", args=[c, ns, n]) for ns, n in picked["running"]], args.iterations),
        ("pod page (deleted incarnation)", [reverse("pod", args=[c, ns, n]) for ns, n in picked["deleted"]],
         args.iterations),
        ("pod page (pending: checks every device)", [reverse("pod", args=[c, ns, n]) for ns, n in picked["pending"]],
         args.heavy_iterations),
        ("explain (api, running pod)",
         [f"/api/explain?cluster={c}&pod={ns}/{n}" for ns, n in picked["running"]], args.iterations),
        ("explain (api, pending pod)",
         [f"/api/explain?cluster={c}&pod={ns}/{n}" for ns, n in picked["pending"]], args.heavy_iterations),
        ("match-devices (api, all devices)",
         [f"/api/match-devices?cluster={c}&class=gpu.nvidia.com&expression={MATCH_EXPRESSION}"],
         args.heavy_iterations),
        ("claims list", [reverse("claims", args=[c])], args.heavy_iterations),
        ("claim page (team member)", [reverse("claim", args=[c, uid]) for uid in member_claims], args.iterations),
        ("pod page (team member, running)", [reverse("pod", args=[c, ns, n]) for ns, n in member_pods],
         args.iterations),
        ("claims list (team member)", [reverse("claims", args=[c])], args.heavy_iterations),
        ("weekly review", [reverse("review", args=[c]) + "?week=2026-11-16"], args.heavy_iterations),
        ("metrics", [f"/metrics?cluster={c}"], args.heavy_iterations),
    ]
    print(json.dumps({"machine": machine(), "load_before": load(), "database": args.database,
                      "sample_sizes": {k: len(v) for k, v in picked.items()}}), flush=True)
    for name, urls, n in endpoints:
        if args.only and name not in args.only:
            continue
        if not urls:
            print(json.dumps({"endpoint": name, "skipped": "nothing to sample"}), flush=True)
            continue
        print(json.dumps(measure(member if "team member" in name else client, name, urls, n, args.timeout)), flush=True)


if __name__ == "__main__":
    main()
