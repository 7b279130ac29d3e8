"""``/api/claims``' entries: what the API says of each claim of the list, with the URL of its page.

Every claim at once (no ``limit``) is tens of thousands of entries at 5,000 nodes. The layer stores
each listing's entry as this API encodes it (``ClaimListing.entry``, ``ClaimSummary.entry`` through
``json.dumps``), so the whole list is those strings joined, each with its page's URL, in one query
and no decoding or encoding per claim; the claim pages' URLs share one ``reverse``. The document is
byte for byte what ``JsonResponse`` makes of the entries computed on read (same keys, values, order
and separators), which is what the API answers when the layer does not cover the snapshot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpResponse, JsonResponse
from django.urls import reverse

from collector.history_reader import StoredHistory
from derived.reading import claim_listing_entries, claims_read
from domain.cluster.claim_summaries import ClaimSummary
from domain.cluster.timefmt import rfc3339
from domain.reports.redaction import Scope

# A UID that URL quoting leaves as it is (Kubernetes UIDs are): its page's URL is the list's prefix and it.
_PLAIN = re.compile(r"[A-Za-z0-9._~-]+")


def every_claim_response(history: StoredHistory, scope: Scope) -> HttpResponse:
    """Every claim ``scope`` sees: the stored entries joined when the layer covers the snapshot, else
    the entries computed on read."""
    as_of = rfc3339(history.as_of)
    stored = claim_listing_entries(history, scope)
    if stored is None or not all(entry for _uid, entry in stored):  # listings written before entries were
        return JsonResponse({"as_of": as_of, "claims": claim_entries(history, claims_read(history, scope))})
    url = claim_url_json(history.cluster.name)
    # Each entry is a JSON object: its URL goes before its closing brace, as the last key.
    claims = ", ".join(f'{entry[:-1]}, "url": {url(uid)}}}' for uid, entry in stored)
    return HttpResponse(f'{{"as_of": {json.dumps(as_of)}, "claims": [{claims}]}}', content_type="application/json")


def claim_entries(history: StoredHistory, summaries: Iterable[ClaimSummary]) -> list[dict[str, Any]]:
    url = claim_url(history.cluster.name)
    return [{**s.entry(), "url": url(s.uid)} for s in summaries]


def claim_url_json(cluster: str) -> Callable[[str], str]:
    """``json.dumps`` of a claim page's URL (``claim_url``): for a plain UID, the list's prefix encoded
    once and the UID after it (JSON escapes none of its characters), not an encoding per claim."""
    url = claim_url(cluster)
    # The opening quote and the prefix claim_url puts before a plain UID, without the closing quote.
    quoted_prefix = json.dumps(_claims_prefix(cluster))[:-1]

    def encoded(uid: str) -> str:
        if _PLAIN.fullmatch(uid):
            return f'{quoted_prefix}{uid}/"'
        return json.dumps(url(uid))

    return encoded


def claim_url(cluster: str) -> Callable[[str], str]:
    """The URL of a claim's page, as ``reverse("claim", …)`` gives it, reversed once per list."""
    prefix = _claims_prefix(cluster)

    def url(uid: str) -> str:
        if _PLAIN.fullmatch(uid):
            return f"{prefix}{uid}/"
        return reverse("claim", args=[cluster, uid])

    return url


def _claims_prefix(cluster: str) -> str:
    return reverse("claims", args=[cluster]) + "/"
