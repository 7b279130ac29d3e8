"""The notices page: what Claimline told whom about one cluster, and whether it arrived."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from access.scope import scope_for
from dashboard.clusters import cluster_or_404
from dashboard.views import render_page
from domain.reports.redaction import Redactor
from notify.delivery import known_namespaces, labels
from notify.models import Notice, Scan

NOTICES_PER_PAGE = 100


@require_GET
def notices(request: HttpRequest, cluster: str) -> HttpResponse:
    c = cluster_or_404(cluster)
    scope = scope_for(request.user, c)
    rows = Notice.objects.filter(cluster=c).prefetch_related("deliveries").order_by("-first_seen", "-pk")
    if not scope.admin:
        # Cluster-wide notices (nodes, collection errors) are the platform's.
        rows = rows.filter(namespace__in=sorted(scope.namespaces))
    page = Paginator(rows, NOTICES_PER_PAGE).get_page(request.GET.get("page"))
    names = labels() if scope.admin else {}
    redactor = Redactor(scope, () if scope.admin else known_namespaces(c.pk, (n.message for n in page.object_list)))
    items = [
        {
            "notice": n,
            "message": redactor.text(n.message),
            "deliveries": [
                {"label": names.get(d.target, d.target.split("/")[-1]), "delivery": d}
                for d in sorted(n.deliveries.all(), key=lambda d: d.target)
            ],
        }
        for n in page.object_list
    ]
    context = {
        "cluster": c,
        "items": items,
        "page": page,
        "scan": Scan.objects.filter(cluster=c).first(),
    }
    return render_page(request, "notify/notices.html", context, "notices")
