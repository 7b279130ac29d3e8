from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from collector.models import Cluster, Snapshot
from collector.timeparse import parse_rfc3339
from derived.past_reviews import render_past_reviews
from derived.pipeline import Progress, rebuild
from derived.writer import Derivation, DerivationOrderError


class Command(BaseCommand):
    help = (
        "Derive the Pod explanations of stored snapshots not derived yet (history imported before the "
        "derived layer, or derived by other code), then render the weekly review of every week that ended. "
        "Idempotent and resumable: derived snapshots and weeks whose review stands are skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="only this cluster (default: every stored cluster)")
        parser.add_argument("--since", help="RFC 3339: only snapshots at or after this time")

    def handle(self, *args: object, **options: object) -> None:
        try:
            since = parse_rfc3339(str(options["since"]), "--since") if options["since"] else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        clusters = Cluster.objects.order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(f"no stored history for cluster {options['cluster']!r}")
        for cluster in clusters:
            try:
                count = rebuild(cluster, since, self._progress(cluster.name))
            except DerivationOrderError as exc:
                raise CommandError(
                    f"{cluster.name}: {exc}; a collection derived a newer snapshot meanwhile, run again"
                ) from None
            if not count:
                self.stdout.write(f"{cluster.name}: every snapshot is derived already")
            # Apart from the derivation: history derived before past weeks' reviews were stored has none.
            for week in render_past_reviews(cluster, since):
                self.stdout.write(f"{cluster.name}: rendered the review of the week of {week.date().isoformat()}")

    def _progress(self, name: str) -> Progress:
        def show(i: int, total: int, snapshot: Snapshot, result: Derivation | None) -> None:
            what = result.describe() if result is not None else f"snapshot {snapshot.pk}: nothing stored"
            self.stdout.write(f"{name} [{i}/{total}] {snapshot.at.isoformat()}: {what}")

        return show
