from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from claimline.pipeline import after_import
from collector import history_writer as history
from collector.dumps import DumpError, DumpReader
from collector.management.commands._clusters import default_cluster_name
from collector.timeparse import parse_rfc3339


class Command(BaseCommand):
    help = "Import `kubectl get … -o json|yaml` output as one snapshot taken at --at."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", type=Path)
        parser.add_argument("--at", help="RFC 3339 time of the snapshot (default: now)")
        parser.add_argument("--cluster", help="cluster name (default: the first in CLAIMLINE_CLUSTERS)")

    def handle(self, *args: object, **options: object) -> None:
        try:
            at = parse_rfc3339(options["at"]) if options["at"] else timezone.now()  # type: ignore[arg-type]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        files: list[Path] = options["files"]  # type: ignore[assignment]
        dump = DumpReader(files)
        cluster_name = str(options["cluster"] or default_cluster_name())
        try:
            dump.check()
            # The dump is streamed into the snapshot's transaction: refused part-way, nothing of it stays.
            with transaction.atomic():
                cluster = history.get_cluster(cluster_name)
                snapshot = history.start_snapshot(
                    cluster, at, "import " + " ".join(p.name for p in files), started=timezone.now()
                )
                result = history.write_snapshot(snapshot, dump.objects(), dump.kinds, finished=timezone.now)
        except (DumpError, history.SnapshotOrderError) as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        after_import(snapshot, timezone.now)
        ignored = ", ".join(f"{n} {k}" for k, n in sorted(dump.ignored.items()))
        self.stdout.write(
            f"snapshot {snapshot.pk} of {cluster.name} at {at.isoformat()}: {result.objects_seen} objects, "
            f"{result.versions_written} versions written, {result.deletions} deletions"
            + (f" (ignored: {ignored})" if ignored else "")
        )
