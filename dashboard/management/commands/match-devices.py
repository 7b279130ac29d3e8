from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.domain.cel import SelectorCompileError
from dashboard.domain.matching import match_devices
from dashboard.management.commands._output import as_json
from dashboard.reading import ReadError, open_history


class Command(BaseCommand):
    help = "Which advertised devices a CEL selector matches (optionally within a DeviceClass)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--expression", required=True)
        parser.add_argument("--class", dest="device_class")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--as-of")
        parser.add_argument("--cluster")

    def handle(self, *args: object, **options: object) -> None:
        try:
            history = open_history(options["cluster"], options["as_of"])  # type: ignore[arg-type]
            doc = match_devices(history.state, str(options["expression"]), options["device_class"])  # type: ignore[arg-type]
        except SelectorCompileError as exc:
            raise CommandError(f"the expression does not compile: {exc}") from None
        except (ReadError, LookupError) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(as_json(doc))
            return
        self.stdout.write(f"{len(doc['matched'])} of {doc['total']} devices match")
        for d in doc["matched"]:
            self.stdout.write(f"  {d['driver']} {d['pool']}/{d['device']} on {d.get('node') or '(any node)'}")
        for e in doc["errors"]:
            self.stdout.write(f"  error on {e['device']}: {e['error']}")
