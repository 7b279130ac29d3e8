from __future__ import annotations

from typing import Any

from dashboard.management.commands._output import HistoryCommand
from derived.thresholds import leak_thresholds
from domain.reports.leaks import find_leaks


class Command(HistoryCommand):
    help = "Claims that hold devices they should not, with reasons and device-hours."

    def handle(self, *args: object, **options: Any) -> None:
        doc = find_leaks(self.history(options), leak_thresholds())
        self.emit(options, doc, self._text)

    def _text(self, doc: dict[str, Any]) -> None:
        self.stdout.write(f"as of {doc['as_of']}: {len(doc['claims'])} flagged claims")
        for c in doc["claims"]:
            devices = ", ".join(f"{d['pool']}/{d['device']}" for d in c["devices"])
            self.stdout.write(
                f"  {c['namespace']}/{c['name']}: {c['reason']}, {c['device_hours']} device-hours on {devices}"
            )
            if c.get("message"):
                self.stdout.write(f"    {c['message']}")
