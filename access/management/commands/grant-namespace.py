from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from access.models import NamespaceGrant
from collector.models import Cluster


class Command(BaseCommand):
    help = "Grant (or --revoke) a group's view of a namespace; --list shows every grant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("group", nargs="?")
        parser.add_argument("namespaces", nargs="*")
        parser.add_argument("--cluster", help="only in this cluster (default: every cluster)")
        parser.add_argument("--revoke", action="store_true")
        parser.add_argument("--list", action="store_true")

    def handle(self, *args: object, **options: object) -> None:
        if options["list"]:
            for g in NamespaceGrant.objects.select_related("group", "cluster").order_by("group__name", "namespace"):
                self.stdout.write(f"{g.group.name}\t{g.namespace}\t{g.cluster.name if g.cluster else '*'}")
            return
        if not options["group"] or not options["namespaces"]:
            raise CommandError("usage: grant-namespace GROUP NAMESPACE... [--cluster NAME] [--revoke]")
        cluster = None
        if options["cluster"]:
            try:
                cluster = Cluster.objects.get(name=options["cluster"])
            except Cluster.DoesNotExist:
                raise CommandError(f"no cluster named {options['cluster']!r}") from None
        group, _ = Group.objects.get_or_create(name=str(options["group"]))
        for namespace in options["namespaces"]:  # type: ignore[attr-defined]
            if options["revoke"]:
                NamespaceGrant.objects.filter(group=group, cluster=cluster, namespace=namespace).delete()
                self.stdout.write(f"revoked {group.name} → {namespace}")
            else:
                NamespaceGrant.objects.get_or_create(group=group, cluster=cluster, namespace=namespace)
                self.stdout.write(f"granted {group.name} → {namespace}")
