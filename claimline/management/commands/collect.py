from __future__ import annotations

import contextlib
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from claimline.scheduler import collect_all, run_forever
from collector.management.commands._clusters import configured_names


class Command(BaseCommand):
    help = "Snapshot the configured clusters: once, or every CLAIMLINE_COLLECT_INTERVAL seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one collection of each cluster, then exit")
        parser.add_argument("--cluster", action="append", help="only this cluster (repeatable)")

    def handle(self, *args: object, **options: object) -> None:
        names = configured_names(options["cluster"])  # type: ignore[arg-type]
        if options["once"]:
            # A writer of the cluster at work (the scheduler, an import) is waited for, not skipped:
            # its lease lasts at most CLAIMLINE_COLLECT_LOCK_TIMEOUT.
            outcomes = collect_all(names, timezone.now, wait=settings.CLAIMLINE_COLLECT_LOCK_TIMEOUT)
            for outcome in outcomes:
                snapshot = outcome.snapshot
                if snapshot is None:
                    # Nothing recorded it (the database went away mid-write, say): the error is only here.
                    self.stderr.write(f"{outcome.name}: failed: {outcome.error or outcome.skipped}")
                    continue
                self.stdout.write(
                    f"{snapshot.cluster.name}: {snapshot.status} at {snapshot.at.isoformat()}: "
                    f"{snapshot.objects_seen} objects, {snapshot.versions_written} versions written, "
                    f"{snapshot.deletions} deletions"
                    + (f"\n  {snapshot.error}" if snapshot.error else "")
                )
            if not names or any(o.failed or o.snapshot is None for o in outcomes):
                raise SystemExit(1)
            return
        self.stdout.write(
            f"collecting {', '.join(names)} every {settings.CLAIMLINE_COLLECT_INTERVAL}s (Ctrl-C to stop)"
        )
        with contextlib.suppress(KeyboardInterrupt):
            run_forever(names, settings.CLAIMLINE_COLLECT_INTERVAL, timezone.now, threading.Event())
