from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from domain.reports.capacity import week_containing
from notify.review_mail import send_reviews


class Command(BaseCommand):
    help = "E-mail the weekly capacity review (HTML with charts, CSV attached) to CLAIMLINE_REVIEW_EMAILS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="build the e-mails and show them, with recipients or without; send nothing",
        )
        parser.add_argument(
            "--html-out",
            metavar="FILE",
            help="also save each e-mail's HTML body here (several clusters: -CLUSTER is added before the suffix)",
        )
        parser.add_argument("--cluster", action="append", help="only this cluster (repeatable)")
        parser.add_argument("--week", help="the Monday (YYYY-MM-DD) the reviewed week starts; default: last week")
        parser.add_argument("--to", action="append", help="recipient instead of CLAIMLINE_REVIEW_EMAILS (repeatable)")

    def handle(self, *args: object, **options: object) -> None:
        week = None
        if options["week"]:
            try:
                day = datetime.strptime(str(options["week"]), "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                raise CommandError(f"--week {options['week']!r} is not a YYYY-MM-DD date") from None
            week = week_containing(day)
        recipients: list[str] | None = options["to"]  # type: ignore[assignment]
        dry_run = bool(options["dry_run"])
        mails = send_reviews(recipients, options["cluster"], week, dry_run=dry_run)  # type: ignore[arg-type]
        if not mails:
            if dry_run:
                raise CommandError("nothing to show: no cluster (of --cluster) has history; collect some first")
            raise CommandError(
                "nothing to send: set CLAIMLINE_REVIEW_EMAILS (or --to), or look with --dry-run, and collect some "
                "history first"
            )
        html_out = Path(str(options["html_out"])) if options["html_out"] else None
        for mail in mails:
            self.stdout.write(f"{mail.describe()}\n  subject: {mail.message.subject}")
            if html_out is not None:
                path = html_out
                if len(mails) > 1:
                    path = html_out.with_name(f"{html_out.stem}-{mail.cluster}{html_out.suffix}")
                path.write_text(mail.html, encoding="utf-8")
                self.stdout.write(f"  HTML saved to {path}")
            if dry_run:
                self.stdout.write(str(mail.message.body))
