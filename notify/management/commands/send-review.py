from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser

from domain.reports.capacity import week_containing
from notify.review_mail import send_reviews


class Command(BaseCommand):
    help = "E-mail the weekly capacity review (HTML with charts, CSV attached) to CLAIMLINE_REVIEW_EMAILS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="build the e-mails and show them; send nothing")
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
        mails = send_reviews(recipients, options["cluster"], week, dry_run=bool(options["dry_run"]))  # type: ignore[arg-type]
        if not mails:
            raise CommandError("nothing to send: set CLAIMLINE_REVIEW_EMAILS (or --to) and collect some history first")
        for mail in mails:
            self.stdout.write(f"{mail.describe()}\n  subject: {mail.message.subject}")
            if options["dry_run"]:
                self.stdout.write(str(mail.message.body))
