"""The home page: one cluster's overview, or every configured cluster side by side."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET

from collector.models import Cluster, Snapshot
from dashboard import charts
from dashboard.access import redactor_for
from dashboard.clusters import cluster_or_404
from dashboard.domain.overview import across_clusters, overview
from dashboard.reading import ReadError, cluster_audit, cluster_leaks, leak_thresholds, open_history
from dashboard.views import render_page


def collection_status(cluster: Cluster | None) -> dict[str, Any]:
    """The cluster's newest collection run, its status and how long ago it ended (wall clock: this is about now).

    Healthy: the run succeeded (or is under way) and is recent, i.e. within three collection intervals.
    """
    run = Snapshot.objects.filter(cluster=cluster).order_by("-started", "-pk").first() if cluster else None
    if run is None:
        return {"cluster": cluster, "run": None, "healthy": False, "stale": False}
    ended = run.finished or run.started
    stale = timezone.now() - ended > timedelta(seconds=3 * settings.CLAIMLINE_COLLECT_INTERVAL)
    good = run.status in (Snapshot.Status.OK, Snapshot.Status.PARTIAL, Snapshot.Status.RUNNING)
    return {"cluster": cluster, "run": run, "ended": ended, "healthy": good and not stale, "stale": stale}


def _overview_of(cluster: Cluster, user: AbstractBaseUser | AnonymousUser, as_of: str | None) -> dict[str, Any]:
    history = open_history(cluster, as_of)
    redactor = redactor_for(user, cluster, history.state)
    thresholds = leak_thresholds()
    return history.derived(
        ("overview", redactor.scope, thresholds),
        lambda: overview(
            history, redactor, thresholds, leaks=cluster_leaks(history), audit_doc=cluster_audit(history)
        ),
    )


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    names = [c.name for c in settings.CLAIMLINE_CLUSTERS]
    if len(names) == 1:
        return redirect("overview", cluster=names[0])
    known = {c.name: c for c in Cluster.objects.filter(name__in=names)}
    rows = []
    for name in names:
        cluster = known.get(name)
        row: dict[str, Any] = {"name": name, "cluster": cluster, "status": collection_status(cluster)}
        try:
            row["doc"] = _overview_of(cluster, request.user, None) if cluster else None
        except ReadError as exc:
            row["doc"], row["empty_reason"] = None, str(exc)
        rows.append(row)
    total = across_clusters(r["doc"] for r in rows if r["doc"])
    return render_page(request, "dashboard/fleet.html", {"rows": rows, "total": total}, "fleet")


@require_GET
def cluster_overview(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    context: dict[str, Any] = {
        "cluster": c,
        "status": collection_status(c),
        "several": len(settings.CLAIMLINE_CLUSTERS) > 1,
    }
    try:
        doc = _overview_of(c, request.user, request.GET.get("as_of") or None)
    except ReadError as exc:
        context.update(doc=None, empty_reason=str(exc))
    else:
        context.update(doc=doc, chart=charts.devices_over_time(doc["series"], height=260))
    return render_page(request, "dashboard/overview.html", context, "overview")
