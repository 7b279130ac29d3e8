"""The derived layer's judge: what it serves equals what the domain derives on read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings

from collector.history_reader import StoredHistory
from collector.models import Cluster, ObjectVersion, Snapshot
from derived.claim_rows import rows_from, stored_rows
from derived.documents import Packer, unpack
from derived.inventory_listing import (
    InventoryListing,
    device_now_from_rows,
    holder_of,
    listing_from_rows,
    listing_on_read,
)
from derived.match_stock import stored_stock
from derived.models import ClassMatches, InventoryDevice, InventoryUsage, PodExplanation
from derived.reading import (
    audit_read,
    claims_read,
    covers,
    device_history_read,
    explain_read,
    leaks_read,
    metrics_read,
    overview_read,
    stored_explain,
)
from derived.rendered import metrics_text_stands
from derived.reports import valid_rows
from derived.review import review_read
from derived.thresholds import leak_thresholds
from domain.allocator.matching import class_matches, match_devices
from domain.cluster.claim_summaries import claim_summaries
from domain.cluster.state import deleted_of
from domain.cluster.timefmt import parse_time
from domain.inventory.device_history import DeviceIndex, device_history
from domain.inventory.devices import Inventory, taint_rows
from domain.inventory.shared_usage import counter_blocked, counter_sets_of
from domain.reports.audit import audit
from domain.reports.capacity import weekly_review
from domain.reports.leaks import Thresholds, find_leaks
from domain.reports.metrics import Served, render_metrics
from domain.reports.overview import overview
from domain.reports.redaction import Redactor, Scope, known_namespaces
from domain.verdicts.explain import explain


def _json(doc: Any) -> Any:
    return orjson.loads(orjson.dumps(doc))


def assert_layer_matches_derivation(
    cluster_name: str, metrics: bool = True, since: datetime | None = None, derived_only: bool = False
) -> int:
    """Every Pod incarnation at every snapshot (from ``since``; with ``derived_only``, at every derived
    one: the others' changes were covered by a later derivation): the stored explain document equals
    explain's; the audit, every device's history and /metrics too. Returns how many Pod documents
    were compared."""
    cluster = Cluster.objects.get(name=cluster_name)
    pods = sorted(
        set(ObjectVersion.objects.filter(cluster=cluster, kind="Pod").values_list("namespace", "name", "uid"))
    )
    compared = 0
    runs = Snapshot.objects.filter(cluster=cluster, status="ok").order_by("at")
    if since is not None:
        runs = runs.filter(at__gte=since)
    for at in runs.values_list("at", flat=True):
        history = StoredHistory(cluster, at)
        if derived_only and not covers(history):
            continue
        assert covers(history), f"snapshot at {at} is not derived"
        member = _redactors(history)[1]
        judged: list[Any] = []
        for namespace, name, uid in pods:
            if uid not in history.uids_named("Pod", namespace, name):
                continue
            stored = stored_explain(history, namespace, name, uid)
            assert stored is not None, (at, namespace, name, uid)
            derived = explain(StoredHistory(cluster, at), namespace, name, pod_uid=uid)
            assert _json(stored) == _json(derived), (at, namespace, name, uid)
            judged.append(derived)
            # A team member's copy: redacted knowing only the namespaces the document names.
            read, named = explain_read(history, namespace, name, uid)
            assert Redactor(member.scope, named()).document(read) == member.document(derived), (at, namespace, name)
            compared += 1
        assert audit_read(history) == audit(StoredHistory(cluster, at)), at
        counted = valid_rows(history, ClassMatches).values_list("document", flat=True).first()
        assert counted is not None and orjson.loads(counted) == class_matches(StoredHistory(cluster, at).state), at
        for claim_uid in sorted({c["uid"] for doc in judged for c in doc["claims"] if c.get("uid")}):
            # Each claim's boundary rows: its states in every document that judged it.
            assert stored_rows(cluster, claim_uid, at) == rows_from(judged, claim_uid), (at, claim_uid)
        _assert_device_histories_match(cluster, at)
        _assert_inventory_listings_match(cluster, at)
        assert_match_devices_match(cluster, at)
        for kind in ("ResourceSlice", "ResourceClaim", "Pod"):  # what the audit reads of deleted slices
            assert history.deleted(kind) == deleted_of(history.all_versions(kind)), (at, kind)
        for redactor in _redactors(history):  # the overview and the claims list, as an admin and as a team member
            state_claims = [
                s for s in claim_summaries(StoredHistory(cluster, at).state) if redactor.scope.sees(s.namespace)
            ]
            assert claims_read(history, redactor.scope) == state_claims, at
            on_read = overview(StoredHistory(cluster, at), redactor, leak_thresholds())
            assert _json(overview_read(StoredHistory(cluster, at), redactor, leak_thresholds())) == _json(on_read), at
        for thresholds in REVIEW_THRESHOLDS:  # read from the stored leak candidates, else every claim
            stored_leaks = leaks_read(StoredHistory(cluster, at), thresholds)
            assert _json(stored_leaks) == _json(find_leaks(StoredHistory(cluster, at), thresholds)), at
        if metrics:
            thresholds = leak_thresholds()
            # After an unchanged snapshot the text of an earlier one may stand (CLAIMLINE_METRICS_REFRESH).
            standing = metrics_text_stands(cluster.pk, at, thresholds.as_dict())
            described = standing.snapshot.at if standing is not None else at
            assert at - described < timedelta(seconds=settings.CLAIMLINE_METRICS_REFRESH) or described == at
            # The snapshot's own time (and the run health) are added when served, the rest is the text's.
            served = Served(at)
            expected = render_metrics(
                StoredHistory(cluster, described),
                thresholds,
                namespace_cap=settings.CLAIMLINE_METRICS_NAMESPACES,
                served=served,
            )
            assert metrics_read(history, thresholds, served) == expected, at
    return compared


def _assert_device_histories_match(cluster: Cluster, at: datetime) -> None:
    """Every device any claim named up to ``at`` (and one none did): the layer's device history equals
    the one indexed from every claim and Event version."""
    on_read = StoredHistory(cluster, at)
    index = DeviceIndex.of(on_read)
    devices = [*sorted(index.holdings), ("gpu.example.com", "no-pool", "never-held")]
    for device in devices:
        layer = device_history_read(StoredHistory(cluster, at), device)
        assert _json(layer) == _json(device_history(on_read, device, index)), (at, device)


def _listing(listing: InventoryListing) -> Any:
    page = listing.page
    shown = (page.number, page.paginator.num_pages, page.paginator.count, list(page.object_list))
    counts = (listing.total, listing.held, listing.blocked, listing.gpus)
    return _json((shown, counts, listing.partitioned, listing.counter_sets))


def _assert_inventory_listings_match(cluster: Cluster, at: datetime) -> None:
    """The inventory page's content read from the device rows and spans equals what ``Inventory.of``
    gives: every device, each node's, and a later page of a few."""
    usage = valid_rows(StoredHistory(cluster, at), InventoryUsage).values_list("document", flat=True).first()
    assert usage is not None, at
    nodes = set(valid_rows(StoredHistory(cluster, at), InventoryDevice).values_list("node", flat=True))
    for node in ["", *sorted(nodes)]:
        for number, per_page in ((1, 100_000), (2, 3)):
            rows = listing_from_rows(StoredHistory(cluster, at), node, number, per_page, orjson.loads(usage))
            on_read = listing_on_read(StoredHistory(cluster, at), node, number, per_page)
            assert _listing(rows) == _listing(on_read), (at, node, number)
    # The device page's present: each device's row, holder and counter sets, and a device advertised by no row.
    inventory = Inventory.of(StoredHistory(cluster, at).state)
    for device_id in [*inventory.by_id, ("gpu.example.com", "no-pool", "never-held")]:
        now = device_now_from_rows(StoredHistory(cluster, at), device_id, orjson.loads(usage))
        advertised = inventory.by_id.get(device_id)
        holder = inventory.holders.get(device_id)
        assert now.advertised == advertised, (at, device_id)
        assert now.taints == (taint_rows(advertised, inventory.state) if advertised and advertised.taints else [])
        assert now.holder == (holder_of(holder) if holder is not None else None), (at, device_id)
        assert now.counter_sets == _json(counter_sets_of(inventory, device_id)), (at, device_id)
        blocked = counter_blocked(inventory, [advertised]).get(device_id) if advertised else None
        assert now.blocked == _json(blocked), (at, device_id)


# Selectors over what the demo and the scenarios advertise: every device, a capacity compared, the shared
# devices, an attribute some devices lack (an error on those), one false everywhere, and a macro.
MATCH_EXPRESSIONS = (
    "true",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0",
    "device.allowMultipleAllocations",
    "device.attributes['gpu.nvidia.com'].sharing == 'mps'",
    "device.driver == 'nowhere.example.com'",
    "device.attributes['gpu.nvidia.com'].exists(a, a == 'productName')",
)


def assert_match_devices_match(cluster: Cluster, at: datetime) -> None:
    """match-devices over the stored rows (``derived.match_stock``) answers what it answers over the
    state's ``Inventory``, for each selector within no class and within each DeviceClass."""
    history = StoredHistory(cluster, at)
    stock = stored_stock(history)
    assert stock is not None, at
    classes = [None, *sorted(str(c["metadata"]["name"]) for c in history.state.of_kind("DeviceClass"))]
    for class_name in classes:
        for expression in MATCH_EXPRESSIONS:
            on_read = match_devices(StoredHistory(cluster, at).state, expression, class_name)
            assert _json(match_devices(history.state, expression, class_name, stock)) == _json(on_read), (
                at,
                class_name,
                expression,
            )


def _redactors(history: StoredHistory) -> list[Redactor]:
    namespaces = sorted(known_namespaces(history.state))
    member = Redactor(Scope(admin=False, namespaces=frozenset(namespaces[:1])), namespaces)
    return [Redactor(Scope(admin=True), ()), member]


# Short thresholds as well as the configured ones: the generated histories last hours, so only
# these flag every kind of leak in them.
REVIEW_THRESHOLDS = (Thresholds(), Thresholds(orphaned=60, stuck_deletion=60, unreserved=60, held_by_failing_pod=60))


def assert_review_matches_derivation(cluster_name: str) -> dict[str, float]:
    """At every snapshot, the weekly review of the week it falls in and of the week before, read from
    the layer's spans, equals the review on read (as dicts). Returns what was compared: how many
    reviews, and their allocated, leaked and GPU-equivalent hours added up (a test can tell an
    empty comparison from one that exercised leaks and shared devices).

    Fails when a snapshot is not derived: the layer's reading would fall back to the on-read review
    and compare it with itself."""
    cluster = Cluster.objects.get(name=cluster_name)
    compared = {"reviews": 0.0, "allocated": 0.0, "leaked": 0.0, "equivalent": 0.0}
    # The configured thresholds too: the stored renderings are rendered with them.
    thresholds_compared = list(dict.fromkeys((*REVIEW_THRESHOLDS, leak_thresholds())))
    for at in Snapshot.objects.filter(cluster=cluster, status="ok").order_by("at").values_list("at", flat=True):
        monday = (at - timedelta(days=at.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
        assert covers(StoredHistory(cluster, at)), f"snapshot at {at} is not derived"
        for week in (monday, monday - timedelta(days=7)):
            for thresholds in thresholds_compared:
                stored = review_read(StoredHistory(cluster, at), week, thresholds)
                # After an unchanged snapshot the review rendered for an earlier one may stand for it;
                # a week that ended is served its rendering as of a snapshot after its end.
                described = parse_time(stored["as_of"])
                assert described is not None and described <= at
                if week + timedelta(days=7) <= at:
                    assert described >= week + timedelta(days=7)
                else:
                    assert described == at or at - described < timedelta(seconds=settings.CLAIMLINE_REVIEW_REFRESH)
                derived = weekly_review(StoredHistory(cluster, described), week, thresholds)
                assert _json(stored) == _json(derived), (at, week, thresholds)
                totals = derived["totals"]
                compared["reviews"] += 1
                compared["allocated"] += totals["allocated_device_hours"]
                compared["leaked"] += totals["leaked_device_hours"]
                compared["equivalent"] += totals["allocated_gpu_equivalent_hours"]
    return compared


def edit_stored_document(row: PodExplanation, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change a stored Pod document behind the layer's back (pages must show what the row holds)."""
    doc = unpack(row.content, row.dictionary_id)
    edit(doc)
    packer = Packer(row.cluster_id, row.valid_from, [])
    PodExplanation.objects.filter(pk=row.pk).update(
        content=packer.pack(orjson.dumps(doc)), dictionary=packer.dictionary
    )
