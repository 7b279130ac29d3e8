from __future__ import annotations

from datetime import datetime


def parse_rfc3339(value: str, option: str = "--at") -> datetime:
    """An aware datetime from RFC 3339 text; the error names the option."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{option}: {value!r} is not an RFC 3339 time such as 2026-11-20T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{option}: {value!r} has no time zone; add Z or an offset")
    return parsed
