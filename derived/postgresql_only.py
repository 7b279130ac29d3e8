"""Migration steps that exist only on PostgreSQL: indexes in the "C" collation, which SQLite has not by
that name (its text is ordered by code point already)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def on_postgresql(sql: str) -> Callable[[Any, Any], None]:
    """A ``RunPython`` step running ``sql`` on PostgreSQL, nothing elsewhere."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run
