"""Where each configured cluster is read from: ``CLAIMLINE_CLUSTERS`` parsed into ``ClusterSource``s.

A bad entry fails with ``ImproperlyConfigured`` naming it, so a typo stops start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

_CLUSTER_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ClusterSource:
    """Where one configured cluster is read from.

    ``kind`` is ``demo`` (the bundled fake API server), ``in-cluster`` (the pod's
    service account) or ``kubeconfig`` (``path`` and optional ``context``).
    """

    name: str
    kind: str
    path: str | None = None
    context: str | None = None

    def describe(self) -> str:
        if self.kind == "kubeconfig":
            where = self.path or "~/.kube/config"
            return f"kubeconfig {where}" + (f" context {self.context}" if self.context else "")
        return self.kind


def parse_clusters(raw: str, default_kubeconfig: str | None = None) -> list[ClusterSource]:
    """Parse ``CLAIMLINE_CLUSTERS``: ``name=source`` entries separated by commas.

    source: ``demo`` | ``in-cluster`` | ``kubeconfig`` | ``kubeconfig:PATH`` |
    ``kubeconfig:PATH#CONTEXT`` | ``context:CONTEXT`` (in ``CLAIMLINE_KUBECONFIG``).
    """
    clusters: list[ClusterSource] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        name, _, source = entry.partition("=")
        name, source = name.strip(), (source.strip() or "kubeconfig")
        if not _CLUSTER_NAME.match(name):
            raise ImproperlyConfigured(
                f"CLAIMLINE_CLUSTERS: {name!r} is not a valid cluster name (lowercase letters, digits, '-')"
            )
        if any(c.name == name for c in clusters):
            raise ImproperlyConfigured(f"CLAIMLINE_CLUSTERS: cluster {name!r} is listed twice")
        if source in ("demo", "in-cluster"):
            clusters.append(ClusterSource(name, source))
        elif source == "kubeconfig":
            clusters.append(ClusterSource(name, "kubeconfig", default_kubeconfig))
        elif source.startswith("kubeconfig:"):
            path, _, context = source.removeprefix("kubeconfig:").partition("#")
            clusters.append(ClusterSource(name, "kubeconfig", path or default_kubeconfig, context or None))
        elif source.startswith("context:"):
            clusters.append(
                ClusterSource(name, "kubeconfig", default_kubeconfig, source.removeprefix("context:"))
            )
        else:
            raise ImproperlyConfigured(
                f"CLAIMLINE_CLUSTERS: cluster {name!r} has unknown source {source!r} "
                "(expected demo, in-cluster, kubeconfig[:PATH[#CONTEXT]] or context:NAME)"
            )
    if not clusters:
        raise ImproperlyConfigured("CLAIMLINE_CLUSTERS names no cluster")
    return clusters
