"""Kubernetes timestamps in and out."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """An aware datetime from an RFC 3339 field, or None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def earliest(times: Iterable[str | None]) -> str | None:
    """The earliest of RFC 3339 times (as given), ignoring absent and malformed ones."""
    parsed = [(parse_time(t), t) for t in times if t]
    valid = [(p, t) for p, t in parsed if p is not None]
    return min(valid)[1] if valid else None


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
