from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.domain.leaks import find_leaks
from dashboard.management.commands._output import as_json
from dashboard.reading import ReadError, leak_thresholds, open_history


class Command(BaseCommand):
    help = "Claims that hold devices they should not, with reasons and device-hours."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--as-of")
        parser.add_argument("--cluster")

    def handle(self, *args: object, **options: object) -> None:
        try:
            history = open_history(options["cluster"], options["as_of"])  # type: ignore[arg-type]
        except ReadError as exc:
            raise CommandError(str(exc)) from None
        doc = find_leaks(history, leak_thresholds())
        if options["json"]:
            self.stdout.write(as_json(doc))
            return
        self.stdout.write(f"as of {doc['as_of']}: {len(doc['claims'])} flagged claims")
        for c in doc["claims"]:
            devices = ", ".join(f"{d['pool']}/{d['device']}" for d in c["devices"])
            self.stdout.write(
                f"  {c['namespace']}/{c['name']}: {c['reason']}, {c['device_hours']} device-hours on {devices}"
            )
            if c.get("message"):
                self.stdout.write(f"    {c['message']}")
