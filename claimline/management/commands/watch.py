from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from claimline.watching import StopSignal, watch_cluster
from collector.management.commands._clusters import configured_names


class Command(BaseCommand):
    help = (
        "Watch the configured clusters (list once, then watch) until SIGTERM, storing every change as it "
        "arrives, each batch then derived and told to notices. One process watches a cluster at a time "
        "(a lease in Redis); the others stand by."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", action="append", help="only this cluster (repeatable)")
        parser.add_argument(
            "--alive-dir", type=Path, default=None,
            help="touch DIR/<cluster> on every event, bookmark and list page (default: CLAIMLINE_WATCH_ALIVE_DIR)",
        )
        parser.add_argument("--no-lease", action="store_true", help="watch without the Redis lease (one process only)")

    def handle(self, *args: object, **options: Any) -> None:
        names = configured_names(options["cluster"])
        stop = StopSignal()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        alive_dir = options["alive_dir"] or settings.CLAIMLINE_WATCH_ALIVE_DIR
        threads = [
            threading.Thread(
                target=watch_cluster, args=(name, timezone.now, stop, not options["no_lease"], alive_dir),
                name=f"watch-{name}",
            )
            for name in names
        ]
        self.stdout.write(f"watching {', '.join(names)} (SIGTERM stores what arrived and stops)")
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(timeout=0.5)
        self.stdout.write("stopped")
