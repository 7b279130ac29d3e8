"""The home page: one cluster's overview, or every configured cluster side by side."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET

from access.scope import is_platform_admin, redactor_of, scope_for
from collector.history_reader import collection_health
from collector.models import Cluster
from collector.recent_history import ReadError, open_history
from dashboard import charts
from dashboard.clusters import cluster_or_404
from dashboard.views import render_page
from derived.overviews import stored_overview
from derived.reading import overview_read
from derived.thresholds import leak_thresholds
from domain.cluster.timefmt import parse_time
from domain.reports.overview import across_clusters
from notify.delivery import failing_receivers


def collection_status(cluster: Cluster | None, usable_at: datetime | None) -> dict[str, Any]:
    """The cluster's newest finished run (as /metrics reads it) and how long ago its snapshot was taken.

    Stale: taken more than three collection intervals ago (wall clock: this is about now, not the snapshot).
    """
    if cluster is None:
        return {"cluster": None, "health": None, "stale": False}
    health = collection_health(cluster, usable_at or datetime.min.replace(tzinfo=UTC))
    if health.last_run_at is None:
        return {"cluster": cluster, "health": None, "stale": False}
    stale = timezone.now() - health.last_run_at > timedelta(seconds=3 * settings.CLAIMLINE_COLLECT_INTERVAL)
    return {"cluster": cluster, "health": health, "stale": stale}


def _overview_of(cluster: Cluster, user: AbstractBaseUser | AnonymousUser, as_of: str | None) -> dict[str, Any]:
    history = open_history(cluster, as_of)
    scope = scope_for(user, cluster)
    thresholds = leak_thresholds()

    def read() -> dict[str, Any]:
        # Rendered after the snapshot's derivation (a row or a few), else computed from the layer.
        stored = stored_overview(history, scope, thresholds)
        return stored if stored is not None else overview_read(history, redactor_of(user, history), thresholds)

    # One overview per snapshot and scope while the snapshot is loaded.
    return history.derived(("overview", scope, thresholds), read)


def _as_of(doc: dict[str, Any] | None) -> datetime | None:
    return parse_time(doc["as_of"]) if doc else None


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    names = [c.name for c in settings.CLAIMLINE_CLUSTERS]
    if len(names) == 1:
        return redirect("overview", cluster=names[0])
    known = {c.name: c for c in Cluster.objects.filter(name__in=names)}
    rows = []
    for name in names:
        cluster = known.get(name)
        row: dict[str, Any] = {"name": name, "cluster": cluster, "doc": None}
        try:
            row["doc"] = _overview_of(cluster, request.user, None) if cluster else None
        except ReadError as exc:
            row["empty_reason"] = str(exc)
        row["status"] = collection_status(cluster, _as_of(row["doc"]))
        rows.append(row)
    total = across_clusters(r["doc"] for r in rows if r["doc"])
    context = {
        "rows": rows,
        "total": total,
        "failing_receivers": failing_receivers() if is_platform_admin(request.user) else [],
    }
    return render_page(request, "dashboard/fleet.html", context, "fleet")


@require_GET
def cluster_overview(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    context: dict[str, Any] = {"cluster": c, "several": len(settings.CLAIMLINE_CLUSTERS) > 1, "doc": None}
    try:
        doc = _overview_of(c, request.user, request.GET.get("as_of") or None)
    except ReadError as exc:
        context["empty_reason"] = str(exc)
    else:
        context.update(doc=doc, chart=charts.devices_over_time(doc["series"], height=260))
    context["status"] = collection_status(c, _as_of(context["doc"]))
    # Receivers are the platform's configuration (URLs, addresses): only admins are told they fail.
    context["failing_receivers"] = failing_receivers() if is_platform_admin(request.user) else []
    return render_page(request, "dashboard/overview.html", context, "overview")
