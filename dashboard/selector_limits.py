"""The bounds on a selector someone typed (domain.allocator.limits), as this deployment sets them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connections

from collector.gcpause import gc_paused
from collector.history_reader import StoredHistory
from derived.match_stock import stored_page, stored_stock
from domain.allocator.device_stock import InventoryStock, page_of
from domain.allocator.limits import Limits, match_devices_within_limits
from domain.inventory.devices import DeviceId, Inventory


def selector_limits() -> Limits:
    return Limits(seconds=settings.CLAIMLINE_SELECTOR_SECONDS, memory_mb=settings.CLAIMLINE_SELECTOR_MEMORY_MB)


def _refuse_queries(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a forked selector evaluation may not query the database")


def forbid_database() -> None:
    """In a forked child: a query raises rather than talk over the parent's connection."""
    for connection in connections.all():
        connection.execute_wrappers.append(_refuse_queries)


def match_devices_typed(history: StoredHistory, expression: str, class_name: str | None) -> dict[str, Any]:
    """``match_devices`` of a selector from the playground, the API or the command, within the limits:
    over the derived layer's device rows when it covers the snapshot, else over the state's inventory."""
    # Tens of thousands of acyclic entries and verdicts: the cyclic collector would rescan the
    # process's heap several times over for nothing (~0.1 s of a 5,000-node answer).
    with gc_paused():
        return match_devices_within_limits(
            history.state, expression, class_name, selector_limits(), forbid_database, stored_stock(history)
        )


def match_devices_page(
    history: StoredHistory, expression: str, class_name: str | None, after: Sequence[str] | None, count: int
) -> tuple[dict[str, Any], DeviceId | None]:
    """``match_devices_typed`` of one page: the answer for the first ``count`` devices after ``after`` (by
    driver, pool, name), ``total`` still every device of the snapshot; and the key of the page's last
    device when more follow (None after the last page). Read from the page's device rows when the layer
    covers the snapshot, so a page costs its devices whatever the cluster's size."""
    key: DeviceId | None = (after[0], after[1], after[2]) if after is not None else None
    page = stored_page(history, key, count) or page_of(InventoryStock(Inventory.of(history.state)), key, count)
    found = match_devices_within_limits(
        history.state, expression, class_name, selector_limits(), forbid_database, page.stock
    )
    last = page.stock.devices[-1].id if page.more else None
    return {**found, "total": page.total}, last
