from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from dashboard.management.commands._output import HistoryCommand
from dashboard.selector_limits import match_devices_typed
from domain.allocator.cel import SelectorCompileError, SelectorLimitExceeded


class Command(HistoryCommand):
    help = "Which advertised devices a CEL selector matches (optionally within a DeviceClass)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--expression", required=True)
        parser.add_argument("--class", dest="device_class")
        super().add_arguments(parser)

    def handle(self, *args: object, **options: Any) -> None:
        history = self.history(options)
        try:
            doc = match_devices_typed(history, str(options["expression"]), options["device_class"])
        except SelectorCompileError as exc:
            raise CommandError(f"the expression does not compile: {exc}") from None
        except SelectorLimitExceeded as exc:
            raise CommandError(f"the expression was stopped: {exc}") from None
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        self.emit(options, doc, self._text)

    def _text(self, doc: dict[str, Any]) -> None:
        self.stdout.write(f"{len(doc['matched'])} of {doc['total']} devices match")
        for d in doc["matched"]:
            busy = f" (unavailable: {d['unavailable']})" if d.get("available") is False else ""
            self.stdout.write(f"  {d['driver']} {d['pool']}/{d['device']} on {d.get('node') or '(any node)'}{busy}")
        for line in doc.get("why_not", []):
            self.stdout.write(f"  not matched: {line}")
        for e in doc["errors"]:
            self.stdout.write(f"  error on {e['device']}: {e['error']}")
