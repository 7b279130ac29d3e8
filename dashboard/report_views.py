"""Platform pages: retained claims, the weekly capacity review, inventory, audit, DeviceClasses."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from access.scope import is_platform_admin, redactor_of, scope_for
from collector.history_reader import StoredHistory
from collector.recent_history import ReadError, open_history
from dashboard import charts
from dashboard.breakdown import breakdown_rows
from dashboard.clusters import cluster_or_404
from dashboard.leak_flags import flags_for
from dashboard.views import render_page
from derived.inventory_listing import device_now, inventory_listing
from derived.reading import class_matches_read, device_history_read
from derived.reports import audit_read, leaks_read
from derived.review import review_read
from derived.thresholds import leak_thresholds
from domain.allocator.matching import class_selectors
from domain.cluster.state import meta
from domain.inventory.devices import (
    AdvertisedDevice,
    Inventory,
    typed_value,
)
from domain.inventory.shared_usage import shared_device_usage
from domain.reports.capacity import percent, review_csv_rows, review_table, week_containing
from domain.reports.redaction import Scope, visible_holders

DEVICES_PER_PAGE = 500


def _history(request: HttpRequest, cluster: str) -> tuple[Any, StoredHistory]:
    c = cluster_or_404(cluster)
    try:
        return c, open_history(c, request.GET.get("as_of") or None)
    except ReadError as exc:
        raise Http404(str(exc)) from None


def threshold_words(thresholds: dict[str, float]) -> list[tuple[str, str]]:
    """Each leak reason's threshold as a reader says it: 15 min, 6 h."""
    out = []
    for reason, seconds in thresholds.items():
        minutes = round(seconds / 60)
        out.append((reason, f"{minutes // 60} h" if minutes >= 60 and minutes % 60 == 0 else f"{minutes} min"))
    return out


@require_GET
def leaks(request: HttpRequest, cluster: str) -> HttpResponse:
    c, history = _history(request, cluster)
    doc = redactor_of(request.user, history).leaks(leaks_read(history, leak_thresholds()))
    # ?namespace= (what an alert's link names): that namespace's claims only.
    namespace = request.GET.get("namespace", "")
    if namespace:
        doc = {**doc, "claims": [claim for claim in doc["claims"] if claim["namespace"] == namespace]}
    context = {
        "cluster": c,
        "doc": doc,
        "namespace": namespace,
        "total": round(sum(claim["device_hours"] for claim in doc["claims"]), 2),
        "leaked": round(sum(claim["leaked_device_hours"] for claim in doc["claims"]), 2),
        "threshold_words": threshold_words(doc["thresholds"]),
    }
    return render_page(request, "dashboard/leaks.html", context, "leaks")


# The review of a week reads the eight weeks up to it and links the week before: a week earlier than
# this would take its dates before the calendar's first day (OverflowError). Ten weeks leave a margin.
EARLIEST_WEEK = datetime.min.replace(tzinfo=UTC) + timedelta(weeks=10)


def week_start_of(value: str | None, as_of: datetime) -> datetime:
    """Monday 00:00 UTC of ``value`` (YYYY-MM-DD), or of the week containing ``as_of``.

    A value that is no date, or a week too early for the review to reach back from, is a 400.
    """
    if value:
        try:
            day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise BadRequest(f"week {value!r} is not a YYYY-MM-DD date") from None
        if day < EARLIEST_WEEK:
            raise BadRequest(f"week {value!r} is too early: the review can start at {EARLIEST_WEEK.date()}")
        return week_containing(day)
    return week_containing(as_of)


def _review(request: HttpRequest, cluster: str) -> tuple[Any, dict[str, Any], datetime, bool]:
    """The review of the asked week; the last flag says whether a later week has begun as of the snapshot."""
    c, history = _history(request, cluster)
    start = week_start_of(request.GET.get("week"), history.as_of)
    current = week_start_of(None, history.as_of)
    if start > current:
        raise Http404(f"the week of {start.date()} has not begun as of {history.as_of.isoformat()}")
    thresholds = leak_thresholds()
    # One snapshot's review never changes: the page and its CSV share it while the snapshot is loaded.
    doc = history.derived(("review", start, thresholds), lambda: review_read(history, start, thresholds))
    return c, redactor_of(request.user, history).review(doc), start, start < current


@require_GET
def review(request: HttpRequest, cluster: str) -> HttpResponse:
    c, doc, start, has_next = _review(request, cluster)
    header, rows = review_table(doc)
    context = {
        "cluster": c,
        "doc": doc,
        "week": start.date().isoformat(),
        "previous": (start - timedelta(days=7)).date().isoformat(),
        "next": (start + timedelta(days=7)).date().isoformat() if has_next else None,
        "devices_chart": charts.devices_over_time(doc["series"]["devices"]),
        "weekly_chart": charts.leaked_by_week(doc["series"]["weekly"]),
        "header": header,
        "breakdown": breakdown_rows(rows),
        # Allocated ÷ advertised device-hours, the cluster's and each model's (cluster-wide numbers,
        # which a team member sees too, as on the overview).
        "utilization": percent(doc["totals"].get("utilization")),
        "previous_utilization": percent(doc["totals"].get("previous_utilization")),
        "models": [{**m, "utilization_percent": percent(m.get("utilization"))} for m in doc["by_model"]],
        "threshold_words": threshold_words(doc["thresholds"]),
        "print": request.GET.get("print") == "1",
    }
    return render_page(request, "dashboard/review.html", context, "review")


@require_GET
def review_csv(request: HttpRequest, cluster: str) -> HttpResponse:
    c, doc, start, _ = _review(request, cluster)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="claimline-{c.name}-week-{start.date()}.csv"'
    csv.writer(response).writerows(review_csv_rows(doc))
    return response


@require_GET
def inventory(request: HttpRequest, cluster: str) -> HttpResponse:
    c, history = _history(request, cluster)
    node = request.GET.get("node", "")
    # 40,000 GPUs at 5,000 nodes: a page of rows is read (derived.inventory_listing), not every slice.
    listing = inventory_listing(history, node, request.GET.get("page"), DEVICES_PER_PAGE)
    # Only the holders' namespaces are checked against the scope: no document to redact, so the
    # namespaces in use (every live Pod's, for a team member) are not read.
    scope = scope_for(request.user, c)
    shown = list(listing.page.object_list)
    # The flags of the claims holding the page's devices: one lookup for the page, not per claim.
    flagged = flags_for(history, scope, [r["holder"]["claim_uid"] for r in shown if r["holder"] is not None])
    context = {
        "cluster": c,
        "rows": [_inventory_row(row, scope, flagged) for row in shown],
        "page": listing.page,
        "node": node,
        "total": listing.total,
        "held": listing.held,
        "blocked": listing.blocked,
        "free": listing.total - listing.held - listing.blocked,
        "gpus": listing.gpus,
        "partitioned": listing.partitioned,
        "as_of": history.as_of,
        "counter_sets": [{**u, "holders": visible_holders(scope, u["holders"])} for u in listing.counter_sets],
    }
    return render_page(request, "dashboard/inventory.html", context, "inventory")


def _inventory_row(row: dict[str, Any], scope: Scope, flagged: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One listed device as the scope may see it: another team's holder redacted, its leak flag."""
    shown: dict[str, Any] = {}
    if row["holder"] is not None:
        [shown] = visible_holders(scope, [row["holder"]])
    blocked = row["blocked"]
    return {
        **row,
        "driver_name": row["driver"],
        "holder": row["holder"] is not None,
        "holder_name": shown.get("claim", ""),
        "holder_uid": shown.get("claim_uid", ""),
        "leak": flagged.get(shown.get("claim_uid", "")) if shown.get("claim_uid") else None,
        "blocked": {**blocked, "holders": visible_holders(scope, blocked["holders"])} if blocked else None,
    }


@require_GET
def audit_page(request: HttpRequest, cluster: str) -> HttpResponse:
    c, history = _history(request, cluster)
    doc = redactor_of(request.user, history).audit(audit_read(history))
    kind = request.GET.get("kind", "")
    kinds = sorted({str(w["kind"]) for w in doc["warnings"]})
    if kind:
        doc = {**doc, "warnings": [w for w in doc["warnings"] if w["kind"] == kind]}
    context = {"cluster": c, "doc": doc, "kind": kind, "kinds": kinds}
    return render_page(request, "dashboard/audit.html", context, "warnings")


@require_GET
def device_classes(request: HttpRequest, cluster: str) -> HttpResponse:
    c, history = _history(request, cluster)
    classes = []
    admin = is_platform_admin(request.user)
    # Counted when the inventory changed (derived.reading): evaluating every class over every device
    # on the first request of a snapshot took ~0.9 s at 2,000 nodes.
    counts = class_matches_read(history)
    for dc in sorted(history.state.of_kind("DeviceClass"), key=lambda o: meta(o).get("name", "")):
        name = meta(dc).get("name", "")
        matched = counts.get(name) or {"matched": 0, "errors": 0, "total": 0}
        classes.append(
            {
                "name": name,
                "selectors": class_selectors(dc),
                "matched": matched["matched"],
                "errors": matched["errors"],
                "total": matched["total"],
                "extended_resource": (dc.get("spec") or {}).get("extendedResourceName"),
                "config_count": len((dc.get("spec") or {}).get("config") or []),
                # Opaque driver parameters may carry site details: admins only.
                "config": (dc.get("spec") or {}).get("config") if admin else None,
            }
        )
    return render_page(request, "dashboard/classes.html", {"cluster": c, "classes": classes}, "classes")


@require_GET
def device(request: HttpRequest, cluster: str, driver: str, pool: str, name: str) -> HttpResponse:
    c, history = _history(request, cluster)
    device_id = (driver, pool, name)
    # Claims and shares are kept or hidden by the namespace alone: the scope, without the namespaces
    # in use that a redactor lists (or the state it would decode for them).
    scope = scope_for(request.user, c)
    doc = device_history_read(history, device_id)
    # The device, its holder and counter sets from the layer's rows (derived.inventory_listing).
    now = device_now(history, device_id)
    advertised = now.advertised
    if not doc["claims"] and advertised is None:
        raise Http404("no such device")
    hidden = [x for x in doc["claims"] if not scope.sees(x["namespace"])]
    doc["claims"] = [x for x in doc["claims"] if scope.sees(x["namespace"])]
    doc["preparation_failures"] = [f for f in doc["preparation_failures"] if scope.sees(f["namespace"])]
    # The shares of a device with allowMultipleAllocations are weighed by the ledger of every live claim.
    shared = None
    if advertised is not None and advertised.shareable:
        shared = shared_device_usage(Inventory.of(history.state), device_id)
    if shared is not None:
        shared["shares"] = visible_holders(scope, shared["shares"])
    flags = flags_for(history, scope, [str(x["uid"]) for x in doc["claims"] if not x.get("until")])
    blocked = now.blocked
    context = {
        "cluster": c,
        "doc": doc,
        "flags": list(flags.values()),
        "sees_all": scope.admin,
        "hidden_claims": len(hidden),
        "shared": shared,
        "counter_sets": [{**u, "holders": visible_holders(scope, u["holders"])} for u in now.counter_sets],
        "blocked": {**blocked, "holders": visible_holders(scope, blocked["holders"])} if blocked else None,
        "holder": visible_holders(scope, [now.holder])[0] if now.holder is not None else None,
        "taints": now.taints,
        "facts": _device_facts(advertised) if advertised is not None else None,
    }
    return render_page(request, "dashboard/device.html", context, "device")


ATTRIBUTE_TYPES = ("string", "int", "bool", "version")  # DeviceAttribute's fields, one set per attribute


def _device_facts(device: AdvertisedDevice) -> dict[str, Any]:
    """What its slice says of the device: the usual attributes first, then every attribute and capacity as typed."""
    attributes = []
    for name, typed in sorted(device.attributes.items()):
        kind = next((k for k in ATTRIBUTE_TYPES if isinstance(typed, dict) and k in typed), "")
        value = typed_value(typed)
        if kind == "bool":
            value = "true" if value else "false"
        qualified_name = name if "/" in name else f"{device.driver}/{name}"
        attributes.append({"name": name, "qualified": qualified_name, "type": kind or "?", "value": value})
    capacity = []
    for name, entry in sorted(device.capacity.items()):
        entry = entry if isinstance(entry, dict) else {}
        policy = entry.get("requestPolicy") if isinstance(entry.get("requestPolicy"), dict) else None
        capacity.append({"name": name, "value": entry.get("value"), "policy": _policy_words(policy)})
    return {
        "model": typed_value(device.attributes.get("productName")),
        "uuid": device.uuid,
        "driver_version": typed_value(device.attributes.get("driverVersion")),
        "node": device.node_name or device.reach.describe(),
        "slice": device.slice_name,
        "multiple": device.shareable,
        "attributes": attributes,
        "capacity": capacity,
    }


def _policy_words(policy: dict[str, Any] | None) -> str:
    """A capacity's requestPolicy as a reader says it: default 10Gi; one of 10Gi, 20Gi; 1Gi to 40Gi in steps of 1Gi."""
    if not policy:
        return ""
    parts = []
    if policy.get("default") is not None:
        parts.append(f"default {policy['default']}")
    if policy.get("validValues"):
        parts.append("one of " + ", ".join(str(v) for v in policy["validValues"]))
    bounds = policy.get("validRange")
    if isinstance(bounds, dict):
        text = f"from {bounds.get('min', '0')}" + (f" to {bounds['max']}" if bounds.get("max") is not None else "")
        if bounds.get("step") is not None:
            text += f" in steps of {bounds['step']}"
        parts.append(text)
    return "; ".join(parts)
