from __future__ import annotations

from typing import Any

from dashboard.management.commands._output import HistoryCommand
from domain.reports.audit import audit


class Command(HistoryCommand):
    help = "Platform warnings: stale inventory, double allocators, admin-access namespaces, template drift."

    def handle(self, *args: object, **options: Any) -> None:
        self.emit(options, audit(self.history(options)), self._text)

    def _text(self, doc: dict[str, Any]) -> None:
        self.stdout.write(f"as of {doc['as_of']}: {len(doc['warnings'])} warnings")
        for w in doc["warnings"]:
            self.stdout.write(f"  {w['kind']:<24} {w['subject']}: {w['message']}")
