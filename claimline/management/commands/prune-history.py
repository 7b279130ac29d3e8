from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from claimline.pipeline import prune_cluster
from collector.models import Cluster
from collector.retention import cutoff_for


class Command(BaseCommand):
    help = (
        "Delete history older than --days that no view at or after that time needs "
        "(see collector/retention.py for the rule)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=int, help="keep this many days (default: CLAIMLINE_RETENTION_DAYS)"
        )
        parser.add_argument("--cluster", help="only this cluster (default: every stored cluster)")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")

    def handle(self, *args: object, **options: object) -> None:
        days = options["days"] if options["days"] is not None else settings.CLAIMLINE_RETENTION_DAYS
        if not isinstance(days, int) or days < 1:
            raise CommandError(f"--days must be at least 1, got {days}")
        clusters = Cluster.objects.order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(f"no stored history for cluster {options['cluster']!r}")
        cutoff = cutoff_for(timezone.now(), days)
        for cluster in clusters:
            result = prune_cluster(cluster, cutoff, dry_run=bool(options["dry_run"]))
            self.stdout.write(result.describe())
