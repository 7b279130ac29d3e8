"""``/api/claims``' entries: what the API says of each claim of the list, with the URL of its page.

Every claim at once (no ``limit``) is tens of thousands of entries at 5,000 nodes: each is built from
the listing's columns as stored (``derived.reading.claim_listing_values``), without a model instance
or a ``ClaimSummary`` per claim, and the claim pages' URLs share one ``reverse``. The entries are
what they were: same keys, same values, same order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import orjson
from django.urls import reverse

from collector.history_reader import StoredHistory
from derived.reading import claim_listing_values
from domain.cluster.claim_summaries import ClaimSummary
from domain.cluster.timefmt import rfc3339
from domain.reports.redaction import Scope

# A UID that URL quoting leaves as it is (Kubernetes UIDs are): its page's URL is the list's prefix and it.
_PLAIN = re.compile(r"[A-Za-z0-9._~-]+")


def every_claim_entry(history: StoredHistory, scope: Scope, summaries: Callable[[], list[ClaimSummary]]) -> list[Any]:
    """Every claim ``scope`` sees: from the layer's listing columns when it covers the snapshot, else
    from ``summaries`` (computed on read)."""
    values = claim_listing_values(history, scope)
    if values is None:
        return claim_entries(history, summaries())
    return _entries(history, ((*row[:4], orjson.loads(row[4]), *row[5:]) for row in values))


def claim_entries(history: StoredHistory, summaries: Iterable[ClaimSummary]) -> list[dict[str, Any]]:
    return _entries(
        history, ((s.uid, s.namespace, s.name, s.state, list(s.devices), s.node, s.created) for s in summaries)
    )


def _entries(
    history: StoredHistory, claims: Iterable[tuple[str, str, str, str, list[str], str, datetime | None]]
) -> list[dict[str, Any]]:
    url = claim_url(history.cluster.name)
    return [
        {
            "uid": uid,
            "namespace": namespace,
            "name": name,
            "state": state,
            "devices": devices,
            "node": node,
            "created": rfc3339(created),
            "url": url(uid),
        }
        for uid, namespace, name, state, devices, node, created in claims
    ]


def claim_url(cluster: str) -> Callable[[str], str]:
    """The URL of a claim's page, as ``reverse("claim", …)`` gives it, reversed once per list."""
    prefix = reverse("claims", args=[cluster]) + "/"

    def url(uid: str) -> str:
        if _PLAIN.fullmatch(uid):
            return f"{prefix}{uid}/"
        return reverse("claim", args=[cluster, uid])

    return url
