from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from claimline.pipeline import after_import, derive_import
from collector import history_writer as history
from collector.dumps import DumpError, DumpReader
from collector.locks import HistoryLease
from collector.management.commands._clusters import default_cluster_name
from collector.timeparse import parse_rfc3339


def refuse_future(at: datetime, now: datetime) -> None:
    """History only moves forward: a snapshot from the future would stop every collection until then."""
    skew = timedelta(seconds=settings.CLAIMLINE_CLOCK_SKEW)
    if at > now + skew:
        ahead = timedelta(seconds=int((at - now).total_seconds()))
        raise CommandError(
            f"nothing imported: --at {at.isoformat()} is {ahead} in the future (it is {now.isoformat()} "
            f"here); a snapshot may be at most CLAIMLINE_CLOCK_SKEW={settings.CLAIMLINE_CLOCK_SKEW}s ahead, "
            "since no collection could be stored before it"
        )


class Command(BaseCommand):
    help = "Import `kubectl get … -o json|yaml` output as one snapshot taken at --at."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", type=Path)
        parser.add_argument("--at", help="RFC 3339 time of the snapshot (default: now)")
        parser.add_argument("--cluster", help="cluster name (default: the first in CLAIMLINE_CLUSTERS)")
        parser.add_argument(
            "--wait", type=float, default=None,
            help="seconds to wait for a collection of the cluster to finish (default: CLAIMLINE_COLLECT_LOCK_TIMEOUT)",
        )

    def handle(self, *args: object, **options: object) -> None:
        try:
            at = parse_rfc3339(options["at"]) if options["at"] else None  # type: ignore[arg-type]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if at is not None:
            refuse_future(at, timezone.now())
        files: list[Path] = options["files"]  # type: ignore[assignment]
        dump = DumpReader(files)
        name = str(options["cluster"] or default_cluster_name())
        source = "import " + " ".join(p.name for p in files)
        try:
            dump.check()
        except DumpError as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        # The cluster's collections write its history too: one writer at a time (collector/locks.py).
        lease = HistoryLease(name, source)
        wait = options["wait"] if options["wait"] is not None else settings.CLAIMLINE_COLLECT_LOCK_TIMEOUT
        if not lease.acquire(wait=float(wait)):  # type: ignore[arg-type]
            raise CommandError(
                f"nothing imported: {lease.describe_holder()} is writing the history of {name}; "
                "try again when it has finished (or pass a longer --wait)"
            )
        try:
            if at is None:
                at = timezone.now()  # taken with the lease: a collection that ran meanwhile is earlier
            try:
                # The dump is streamed into the snapshot's transaction: refused part-way, nothing of it stays.
                with transaction.atomic():
                    cluster = history.get_cluster(name)
                    snapshot = history.start_snapshot(cluster, at, source, started=timezone.now())
                    result = history.write_snapshot(snapshot, dump.objects(), dump.kinds, finished=timezone.now)
            except (DumpError, history.SnapshotOrderError) as exc:
                raise CommandError(f"nothing imported: {exc}") from None
            derive_import(snapshot)
        finally:
            lease.release()
        after_import(snapshot, timezone.now)
        ignored = ", ".join(f"{n} {k}" for k, n in sorted(dump.ignored.items()))
        self.stdout.write(
            f"snapshot {snapshot.pk} of {cluster.name} at {at.isoformat()}: {result.objects_seen} objects, "
            f"{result.versions_written} versions written, {result.deletions} deletions"
            + (f" (ignored: {ignored})" if ignored else "")
        )
