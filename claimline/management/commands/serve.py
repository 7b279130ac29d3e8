from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from claimline.scheduler import start_in_background


class Command(BaseCommand):
    help = (
        "Serve the dashboard; with CLAIMLINE_SCHEDULER=in-process, also watch the clusters "
        "(CLAIMLINE_COLLECT_MODE=watch, the default) or collect every interval (poll)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: object, **options: object) -> None:
        if settings.CLAIMLINE_SCHEDULER == "in-process":
            names = [c.name for c in settings.CLAIMLINE_CLUSTERS]
            mode = settings.CLAIMLINE_COLLECT_MODE
            start_in_background(names, settings.CLAIMLINE_COLLECT_INTERVAL, timezone.now, mode)
            if mode == "watch":
                self.stdout.write(f"watching {', '.join(names)} in-process")
            else:
                self.stdout.write(
                    f"collecting {', '.join(names)} every {settings.CLAIMLINE_COLLECT_INTERVAL}s in-process"
                )
        call_command("runserver", options["addrport"], use_reloader=False)
