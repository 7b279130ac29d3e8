"""Reading Claimline's configuration from the environment.

Every reader fails with ``ImproperlyConfigured`` naming the variable, so a typo
stops start-up instead of surfacing later as odd behaviour.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ImproperlyConfigured(f"{name} must be 'true' or 'false', got {raw!r}")


def env_int(
    name: str, default: int, minimum: int = 0, environ: Mapping[str, str] = os.environ
) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(
    name: str, default: float, minimum: float = 0.0, environ: Mapping[str, str] = os.environ
) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


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


def secret_key(environ: Mapping[str, str], debug: bool, key_file: Path) -> str:
    """``DJANGO_SECRET_KEY``, or for a first local run a key kept in ``key_file``."""
    key = environ.get("DJANGO_SECRET_KEY", "")
    if key:
        if not debug and len(key) < 50:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 50 characters when DJANGO_DEBUG=false")
        return key
    if environ.get("CLAIMLINE_REQUIRE_SECRET_KEY", "") == "true":
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is not set")
    # An embedded first run has no secret to share with other processes, so a
    # generated key persisted beside the database keeps sessions valid across restarts.
    if key_file.exists():
        return key_file.read_text().strip()
    from django.core.management.utils import get_random_secret_key

    key_file.parent.mkdir(parents=True, exist_ok=True)
    key = get_random_secret_key() + get_random_secret_key()
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key
