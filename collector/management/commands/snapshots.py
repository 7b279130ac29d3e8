from __future__ import annotations

import orjson
from django.core.management.base import BaseCommand, CommandParser

from collector.models import Snapshot
from collector.snapshot_runs import snapshots_document


class Command(BaseCommand):
    help = "List snapshot runs, newest first."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--cluster", help="only this cluster")
        parser.add_argument("--limit", type=int, default=100)

    def handle(self, *args: object, **options: object) -> None:
        runs = Snapshot.objects.select_related("cluster").order_by("-at", "-pk")
        if options["cluster"]:
            runs = runs.filter(cluster__name=options["cluster"])
        runs = runs[: int(options["limit"])]  # type: ignore[call-overload]
        if options["json"]:
            self.stdout.write(orjson.dumps(snapshots_document(runs), option=orjson.OPT_INDENT_2).decode())
            return
        self.stdout.write(f"{'ID':>6}  {'CLUSTER':<12} {'AT':<26} {'STATUS':<8} {'SEEN':>7} {'WRITTEN':>8} "
                          f"{'DELETED':>8}  SOURCE")
        for s in runs:
            self.stdout.write(
                f"{s.pk:>6}  {s.cluster.name:<12} {s.at.isoformat():<26} {s.status:<8} {s.objects_seen:>7} "
                f"{s.versions_written:>8} {s.deletions:>8}  {s.source}"
                + (f"\n        error: {s.error.splitlines()[0]}" if s.error else "")
            )
