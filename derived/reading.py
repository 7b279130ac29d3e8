"""Reading the derived layer: explain documents and /metrics' claim states as stored rows.

Each reader answers from the layer when it covers the asked snapshot and otherwise
derives as before (history imported before the layer existed, a failed derivation),
so callers never need to know which happened.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from django.core.paginator import Page, Paginator

from collector.history_reader import StoredHistory, namespaces_in_use, uids_named
from derived.advertised import stored_advertised
from derived.allocated_steps import stored_steps
from derived.device_rows import device_history_of
from derived.documents import unpack
from derived.listings import summary_of
from derived.models import ClaimListing, ClassMatches, DeviceCounts, PodExplanation
from derived.rendered import metrics_text_stands
from derived.reports import (
    after_key,
    audit_read,
    by_code_point,
    cluster_wide,
    covers,
    known_for,
    leak_flags_read,
    leaks_read,
    valid_rows,
)
from derived.review import stored_source
from derived.thresholds import leak_thresholds
from domain.allocator.matching import class_matches
from domain.cluster.claim_summaries import ClaimSummary, claim_summaries, with_leak_flags
from domain.inventory.device_history import DeviceIndex, device_history
from domain.inventory.devices import DeviceId
from domain.reports.leaks import Thresholds
from domain.reports.metrics import Served, render_served, render_stored
from domain.reports.overview import WaitingPod, overview
from domain.reports.redaction import Redactor, Scope, known_namespaces, referenced_namespaces
from domain.verdicts.explain import explain, explain_document, incarnation_entry, pick_incarnation


def stored_explain(
    history: StoredHistory, namespace: str, name: str, pod_uid: str | None = None
) -> dict[str, Any] | None:
    """``verdicts.explain`` read from stored rows; None when the layer cannot answer (derive it then).

    Raises ``PodNotFound`` as explain does for a name or UID the history does not have.
    """
    if not covers(history):
        return None
    uids = uids_named(history.cluster, "Pod", namespace, name, history.as_of)
    uid = pick_incarnation(uids, history.as_of, namespace, name, pod_uid)
    rows = valid_rows(history, PodExplanation).filter(pod_uid__in=uids)
    docs = {pod: unpack(content, d) for pod, content, d in rows.values_list("pod_uid", "content", "dictionary_id")}
    if any(u not in docs for u in uids):
        return None  # an incarnation gone before the layer began
    incarnations = [incarnation_entry(u, docs[u]["pod"]["created"], docs[u]["pod"]["deleted"]) for u in uids]
    return explain_document(history.as_of, incarnations, docs[uid])


def waiting_verdicts(history: StoredHistory) -> dict[str, Mapping[str, Any]] | None:
    """The verdict of every live, unfinished Pod that is not ``ok``, by Pod UID, as stored for the
    asked snapshot; None when the layer does not cover it (the caller derives on read then)."""
    waiting = waiting_read(history)
    return None if waiting is None else {uid: verdict for _ns, _name, uid, verdict in waiting}


def claim_listings(history: StoredHistory, scope: Scope) -> Any:
    """The claims list's rows valid at the asked snapshot that ``scope`` sees, in the list's order
    (namespace, then name, by code point as Python sorts); None when the layer does not cover it."""
    if not covers(history):
        return None
    rows = valid_rows(history, ClaimListing)
    if not scope.admin:
        rows = rows.filter(namespace__in=sorted(scope.namespaces))
    return rows.order_by(*(by_code_point(f) for f in ("namespace", "name", "claim_uid")))


def claim_listing_entries(history: StoredHistory, scope: Scope) -> list[tuple[str, str]] | None:
    """Each listed claim's UID and stored ``/api/claims`` entry (``ClaimListing.entry``), in the list's
    order, fetched in one go (no model instance per claim); None when the layer does not cover the
    snapshot."""
    listed = claim_listings(history, scope)
    if listed is None:
        return None
    return list(listed.values_list("claim_uid", "entry"))


def pod_listings(history: StoredHistory, scope: Scope) -> Any:
    """The Pods page's rows valid at the asked snapshot that ``scope`` sees (live Pods, as their stored
    documents list them), in namespace and name order by code point; None when the layer does not cover it."""
    if not covers(history):
        return None
    rows = valid_rows(history, PodExplanation).filter(live=True)
    if not scope.admin:
        rows = rows.filter(namespace__in=sorted(scope.namespaces))
    return rows.order_by(*(by_code_point(f) for f in ("namespace", "name", "pod_uid")))


def claims_read(history: StoredHistory, scope: Scope) -> list[ClaimSummary]:
    """Every claim ``scope`` sees, as the claims list shows it: from the layer's listings when it
    covers the snapshot (no claim decoded), else from the state."""
    listed = claim_listings(history, scope)
    if listed is None:
        return _claims_on_read(history, scope)
    return [summary_of(row) for row in listed.iterator(2000)]


def _claims_on_read(history: StoredHistory, scope: Scope) -> list[ClaimSummary]:
    return [s for s in claim_summaries(history.state) if scope.sees(s.namespace)]


ClaimKey = tuple[str, ...]  # namespace, name, UID


def claim_key(summary: ClaimSummary) -> ClaimKey:
    """Where a claim stands in the list: namespace, name, then UID (two incarnations of one name),
    each by code point."""
    return (summary.namespace, summary.name, summary.uid)


def claims_after(history: StoredHistory, scope: Scope, after: ClaimKey | None, count: int) -> list[ClaimSummary]:
    """The first ``count`` claims ``scope`` sees whose key (``claim_key``) comes after ``after`` (from
    the first when None), in the list's order: a page of the layer's listings when it covers the
    snapshot (a keyset query, whatever page it is), else from every claim of the state."""
    listed = claim_listings(history, scope)
    if listed is None:
        visible = sorted(_claims_on_read(history, scope), key=claim_key)
        start = bisect_right(visible, after, key=claim_key) if after is not None else 0
        return visible[start : start + count]
    if after is not None:
        listed = after_key(listed, ("namespace", "name", "claim_uid"), after)
    return [summary_of(row) for row in listed[:count]]


@dataclass
class ClaimsPage:
    claims: list[ClaimSummary]  # this page's, leak flags set
    page: Page[Any]
    namespaces: list[str]  # every namespace of the visible claims, for the filter
    total: int  # the visible claims (in the asked namespace)
    leaks: list[dict[str, Any]]  # the leak report's entries of this page's flagged claims (leak_flags_read)


def claims_page(
    history: StoredHistory, scope: Scope, namespace: str, number: str | int | None, per_page: int
) -> ClaimsPage:
    """A page of the claims list: from the layer's listings when it covers the snapshot (a page of
    rows, counted in the database), else from every claim of the state."""
    listed = claim_listings(history, scope)
    if listed is None:
        visible = _claims_on_read(history, scope)
        namespaces = sorted({s.namespace for s in visible})
        if namespace:
            visible = [s for s in visible if s.namespace == namespace]
        page: Page[Any] = Paginator(visible, per_page).get_page(number)
        summaries: list[ClaimSummary] = list(page.object_list)
    else:
        namespaces = sorted(set(listed.order_by().values_list("namespace", flat=True).distinct()))
        page = Paginator(listed.filter(namespace=namespace) if namespace else listed, per_page).get_page(number)
        summaries = [summary_of(row) for row in page.object_list]
    # The page's claims' flags only: one lookup of the stored flags, however many claims the cluster has.
    leaks = leak_flags_read(history, leak_thresholds(), [s.uid for s in summaries])
    return ClaimsPage(with_leak_flags(summaries, {"claims": leaks}), page, namespaces, page.paginator.count, leaks)


def waiting_read(history: StoredHistory) -> list[WaitingPod] | None:
    """Every waiting Pod (live, unfinished, not ``ok``) as stored for the asked snapshot, in namespace
    and name order, with its whole verdict; None when the layer does not cover it."""
    rows = _waiting_rows(history, None)
    if rows is None:
        return None
    read = rows.values_list("namespace", "name", "pod_uid", "content", "dictionary_id")
    return sorted((ns, name, uid, unpack(content, d)["verdict"]) for ns, name, uid, content, d in read)


def waiting_listed(history: StoredHistory, namespaces: Iterable[str] | None = None) -> list[WaitingPod] | None:
    """``waiting_read`` (of ``namespaces`` when given) with what ``overview.group_waiting`` shows of each
    verdict, its boundary, reason and message, from the rows' columns: no document unpacked."""
    rows = _waiting_rows(history, namespaces)
    if rows is None:
        return None
    read = rows.values_list("namespace", "name", "pod_uid", "boundary", "reason", "message")
    return sorted(
        (ns, name, uid, {"boundary": boundary or None, "reason": reason, "message": message})
        for ns, name, uid, boundary, reason, message in read
    )


def _waiting_rows(history: StoredHistory, namespaces: Iterable[str] | None) -> Any:
    if not covers(history):
        return None
    rows = valid_rows(history, PodExplanation).filter(waiting=True)
    return rows if namespaces is None else rows.filter(namespace__in=sorted(namespaces))


def overview_read(history: StoredHistory, redactor: Redactor, thresholds: Thresholds) -> dict[str, Any]:
    """The overview: from the layer's rows when it covers the snapshot (its reports, device counts,
    waiting Pods and allocation spans: no object of the state is read), else derived on read."""
    waiting = waiting_listed(history)
    counts = None
    if waiting is not None:  # the layer covers the snapshot
        counts = cluster_wide(history, DeviceCounts, "document")
    return overview(
        history,
        redactor,
        thresholds,
        leaks=leaks_read(history, thresholds),
        audit_doc=audit_read(history),
        devices=orjson.loads(counts) if counts is not None else None,
        waiting=waiting,
        allocations=stored_source(history, claims=False),
        advertised=lambda _history, start: stored_advertised(history, start),
        steps=lambda _history, start: stored_steps(history, start),
    )


def explain_read(
    history: StoredHistory, namespace: str, name: str, pod_uid: str | None = None
) -> tuple[dict[str, Any], Callable[[], Iterable[str]]]:
    """The explain document, and how to list the namespaces its redaction hides from.

    From the layer, the namespaces come from one query about the names the document refers to
    (a redactor only looks those up); derived on read, from the state the derivation loaded
    anyway (``domain.reports.redaction.known_namespaces``).
    """
    doc = stored_explain(history, namespace, name, pod_uid)
    if doc is not None:
        return doc, lambda: namespaces_in_use(history.cluster, history.as_of, among=referenced_namespaces(doc))
    return explain(history, namespace, name, pod_uid=pod_uid), lambda: known_namespaces(history.state)


def metrics_read(history: StoredHistory, thresholds: Thresholds, served: Served) -> str:
    """/metrics: the text the derivation rendered for this snapshot, else rendered now from what the
    layer stored of it when it covers the snapshot; completed with ``served`` (its time and age, the
    run-health families, the dashboard's link), cheap, so a scrape's snapshot age is never stale."""
    stored = metrics_text_stands(history.cluster.pk, history.as_of, thresholds.as_dict()) if covers(history) else None
    if stored is not None:
        text = stored.text
        if text.startswith(_OLD_AS_OF):  # rendered by an earlier version, with the snapshot's time first
            text = text.split("\n", 3)[3]
    else:
        text = render_stored(history, thresholds, known_for(history, thresholds), settings.CLAIMLINE_METRICS_NAMESPACES)
    return text + render_served(served)


_OLD_AS_OF = "# HELP claimline_as_of_timestamp_seconds "


def device_history_read(history: StoredHistory, device: DeviceId) -> dict[str, Any]:
    """One device's history: from the claims and Events the layer's lookups name when it covers the
    snapshot (the device's own, whatever the cluster's size), else from every claim and Event version
    of the history, indexed once per loaded snapshot for all its device pages."""
    if covers(history):
        return device_history_of(history, device)  # a few queries: a document of its own per request
    index = history.derived("device-index", lambda: DeviceIndex.of(history))
    return device_history(history, device, index)


def class_matches_read(history: StoredHistory) -> dict[str, dict[str, int]]:
    """Each DeviceClass's matching devices as of the snapshot: stored when the layer covers it and
    has a row (snapshots derived before the table existed have none), else counted on read."""
    if covers(history):
        stored = cluster_wide(history, ClassMatches, "document")
        if stored is not None:
            return orjson.loads(stored)  # type: ignore[no-any-return]
    return class_matches(history.state)
