from __future__ import annotations

from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from collector.history_reader import StoredHistory
from collector.recent_history import ReadError, open_history


def as_json(document: Any) -> str:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


class HistoryCommand(BaseCommand):
    """A command that reads one cluster's stored history as of a time and prints text or --json."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--as-of", help="RFC 3339 time (default: the latest snapshot)")
        parser.add_argument("--cluster", help="default: the first in CLAIMLINE_CLUSTERS")

    def history(self, options: dict[str, Any]) -> StoredHistory:
        try:
            return open_history(options["cluster"], options["as_of"])
        except ReadError as exc:
            raise CommandError(str(exc)) from None

    def emit(self, options: dict[str, Any], document: dict[str, Any], text: Any) -> None:
        """``text`` is a callable writing the human form; --json prints the document instead."""
        if options["json"]:
            self.stdout.write(as_json(document))
        else:
            text(document)
