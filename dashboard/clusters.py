"""Resolving the cluster a request or command is about."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404

from collector.models import Cluster


def default_cluster_name() -> str:
    return settings.CLAIMLINE_CLUSTERS[0].name


def cluster_or_404(name: str) -> Cluster:
    try:
        return Cluster.objects.get(name=name)
    except Cluster.DoesNotExist:
        raise Http404(f"no cluster named {name}") from None
