from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction

from access.models import NamespaceGrant

DEMO_PASSWORD = "claimline-demo"  # noqa: S105 - the local demo's documented password


class Command(BaseCommand):
    help = "For the local demo only: create an admin and a team member if no user exists yet."

    @transaction.atomic
    def handle(self, *args: object, **options: object) -> None:
        if User.objects.exists():
            return
        admins, _ = Group.objects.get_or_create(name=settings.CLAIMLINE_ADMIN_GROUP)
        admin = User.objects.create_user("admin", password=DEMO_PASSWORD)
        admin.groups.add(admins)
        team, _ = Group.objects.get_or_create(name="ml-training")
        NamespaceGrant.objects.get_or_create(group=team, cluster=None, namespace="ml-training")
        alice = User.objects.create_user("alice", password=DEMO_PASSWORD)
        alice.groups.add(team)
        self.stdout.write(
            f"demo users: admin (platform admin) and alice (team ml-training), password {DEMO_PASSWORD}"
        )
