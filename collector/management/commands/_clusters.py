from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError


def default_cluster_name() -> str:
    return settings.CLAIMLINE_CLUSTERS[0].name


def configured_names(requested: list[str] | None) -> list[str]:
    known = [c.name for c in settings.CLAIMLINE_CLUSTERS]
    if not requested:
        return known
    unknown = [n for n in requested if n not in known]
    if unknown:
        raise CommandError(f"not in CLAIMLINE_CLUSTERS: {', '.join(unknown)} (configured: {', '.join(known)})")
    return requested
