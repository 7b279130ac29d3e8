from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.domain.audit import audit
from dashboard.management.commands._output import as_json
from dashboard.reading import ReadError, open_history


class Command(BaseCommand):
    help = "Platform warnings: stale inventory, double allocators, admin-access namespaces, template drift."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--as-of")
        parser.add_argument("--cluster")

    def handle(self, *args: object, **options: object) -> None:
        try:
            history = open_history(options["cluster"], options["as_of"])  # type: ignore[arg-type]
        except ReadError as exc:
            raise CommandError(str(exc)) from None
        doc = audit(history)
        if options["json"]:
            self.stdout.write(as_json(doc))
            return
        self.stdout.write(f"as of {doc['as_of']}: {len(doc['warnings'])} warnings")
        for w in doc["warnings"]:
            self.stdout.write(f"  {w['kind']:<24} {w['subject']}: {w['message']}")
