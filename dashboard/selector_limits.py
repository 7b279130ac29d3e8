"""The bounds on a selector someone typed (domain.allocator.limits), as this deployment sets them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connections

from collector.history_reader import StoredHistory
from derived.match_stock import stored_stock
from domain.allocator.limits import Limits, match_devices_within_limits


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
    return match_devices_within_limits(
        history.state, expression, class_name, selector_limits(), forbid_database, stored_stock(history)
    )
