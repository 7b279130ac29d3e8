"""The overview of a cluster's latest derived snapshot, rendered after its derivation as /metrics is.

Computed on read, a snapshot's first overview reads the leak report's candidates' histories, the
allocation spans and the slices' versions of the chart's 24 hours, and for a team member every
live claim and Pod for the namespaces in use: over a second at 5,000 nodes, for every snapshot's
first reader (bench/README.md). Rendered once here, a reader loads a few rows: the document's
cluster-wide parts (inventory, chart); the flagged claims (a team member: its own namespaces'
``OverviewNamespace`` rows, redacted as on read against the namespaces in use stored beside them);
the audit's warnings counted by subject namespace; and the waiting Pods from their own stored rows
(``derived.reading.waiting_listed``, one query of the namespaces asked), as before.

``overview.overview`` stays the one definition: the rendering calls it, and a reader's parts go
through the same ``group_waiting``, ``flagged_summary`` and redactor as on read, so both paths give
the same document (tests/test_overview_rendered.py compares them). A rendering stands for the
snapshot it was rendered for, with the same thresholds and DOMAIN_VERSION, and for the later ones
that changed nothing (``derived.rendered.stands_for``: no object version, no derived row) until it
is CLAIMLINE_OVERVIEW_REFRESH old: its flagged hours and chart move with time alone, but slowly, and
rendering costs over a second at 5,000 nodes, which a quiet checkpoint every collection interval
would spend for nothing. Served for such a later snapshot, the document's ``as_of`` is that
snapshot's, and ``figures_as_of`` says the time its flagged hours and chart were computed at.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.db import transaction

from collector.history_reader import StoredHistory, namespaces_in_use
from collector.models import Snapshot
from derived.models import DOMAIN_VERSION, OverviewDocument, OverviewNamespace
from derived.reading import overview_read, waiting_listed
from derived.rendered import latest_derived, stands_for
from derived.reports import audit_read, covers, leaks_read
from derived.thresholds import leak_thresholds
from domain.cluster.timefmt import rfc3339
from domain.reports.leaks import Thresholds
from domain.reports.overview import flagged_summary, group_waiting, warning_counts
from domain.reports.redaction import Redactor, Scope

ADMIN = Scope(admin=True)
BATCH = 500


def render_latest_overview(snapshot: Snapshot, force: bool = False) -> bool:
    """Store the cluster's overview as of ``snapshot`` with the configured thresholds; False, rendering
    nothing, when a newer snapshot exists or the snapshot is not derived (its own rendering follows,
    or readers compute it), or (unless ``force``) the stored one stands for it: rendered for it, or for
    an earlier snapshot with nothing changed since, less than CLAIMLINE_OVERVIEW_REFRESH before it."""
    if not latest_derived(snapshot):
        return False
    thresholds = leak_thresholds()
    if not force and _standing_row(snapshot.cluster_id, snapshot.at, thresholds) is not None:
        return False
    history = StoredHistory(snapshot.cluster, snapshot.at)
    try:
        if not covers(history):
            return False
        document = overview_read(history, Redactor(ADMIN, ()), thresholds)
        del document["pods"]  # read from the Pods' rows when served
        parts = _namespace_parts(leaks_read(history, thresholds)["claims"])
        warnings = Counter((_subject_namespace(w), str(w["kind"])) for w in audit_read(history)["warnings"])
        known = sorted(namespaces_in_use(history.cluster, history.as_of))
    finally:
        history.release()
    with transaction.atomic():
        OverviewNamespace.objects.filter(overview_id=snapshot.cluster_id).delete()
        OverviewDocument.objects.update_or_create(
            cluster_id=snapshot.cluster_id,
            defaults={
                "snapshot": snapshot,
                "thresholds": orjson.dumps(thresholds.as_dict()).decode(),
                "version": DOMAIN_VERSION,
                "document": orjson.dumps(document).decode(),
                "namespaces": orjson.dumps(known).decode(),
                "warnings": orjson.dumps(sorted([ns, kind, n] for (ns, kind), n in warnings.items())).decode(),
            },
        )
        OverviewNamespace.objects.bulk_create(
            [
                OverviewNamespace(
                    overview_id=snapshot.cluster_id,
                    namespace=namespace,
                    flagged=orjson.dumps(part).decode(),
                )
                for namespace, part in sorted(parts.items())
            ],
            batch_size=BATCH,
        )
    return True


def _namespace_parts(flagged: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The flagged claims by namespace, each entry with its place in the report (which lists them in its
    own order)."""
    parts: dict[str, list[Any]] = {}
    for place, entry in enumerate(flagged):
        parts.setdefault(str(entry.get("namespace") or ""), []).append([place, entry])
    return parts


def _subject_namespace(warning: dict[str, Any]) -> str:
    """The name ``Redactor.audit`` decides a warning's visibility by (a node, a namespace, or the
    namespace of ``namespace/claim``)."""
    subject = str(warning.get("subject", ""))
    return subject.split("/", 1)[0] if "/" in subject else subject


def stored_overview(history: StoredHistory, scope: Scope, thresholds: Thresholds) -> dict[str, Any] | None:
    """The overview ``scope`` sees from the rendering that stands for the history's snapshot (``_standing_row``),
    or None when none does (a later or changed snapshot's, other thresholds, other code): the caller
    computes it then."""
    row = _standing_row(history.cluster.pk, history.as_of, thresholds)
    if row is None:
        return None
    document: dict[str, Any] = orjson.loads(row.document)
    if row.snapshot.at != history.as_of:
        # Rendered for an earlier snapshot that nothing changed since: the page is about the asked one,
        # and says when the figures that move with time alone were computed.
        document["figures_as_of"] = document["as_of"]
        document["as_of"] = rfc3339(history.as_of)
    # The waiting Pods from their rows, as on read: a stored document's verdict is what a page shows.
    waiting = waiting_listed(history, None if scope.admin else scope.namespaces)
    if waiting is None:
        return None
    if scope.admin:
        document["pods"] = group_waiting(waiting, Redactor(scope, ()))
        return document
    redactor = Redactor(scope, orjson.loads(row.namespaces))
    # Claims without a namespace are seen by everyone (``Scope.sees``), as on read.
    parts = OverviewNamespace.objects.filter(overview_id=history.cluster.pk, namespace__in=[*scope.namespaces, ""])
    flagged = sorted(
        (place, entry) for claims in parts.values_list("flagged", flat=True) for place, entry in orjson.loads(claims)
    )
    kinds: Counter[str] = Counter()
    for namespace, kind, count in orjson.loads(row.warnings):
        if namespace not in redactor.hidden:
            kinds[kind] += count
    document.update(
        pods=group_waiting(waiting, redactor),
        flagged=flagged_summary(redactor.leaks({"claims": [entry for _place, entry in flagged]})),
        warnings=warning_counts(kinds),
    )
    return document


def _standing_row(cluster_id: int, at: datetime, thresholds: Thresholds) -> OverviewDocument | None:
    """The cluster's rendering when it may stand for the snapshot at ``at``: by this code, with these
    thresholds, and for that snapshot or an earlier one nothing changed since (``stands_for``)."""
    row = (
        OverviewDocument.objects.filter(cluster_id=cluster_id, version=DOMAIN_VERSION)
        .select_related("snapshot")
        .first()
    )
    if row is None or orjson.loads(row.thresholds) != thresholds.as_dict():
        return None
    if not stands_for(cluster_id, row.snapshot.at, at, settings.CLAIMLINE_OVERVIEW_REFRESH):
        return None
    return row
