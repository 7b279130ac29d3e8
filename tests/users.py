"""Signed-in test clients: a user in groups, and the demo's admin and team member (``ml-training``)."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import Group, User
from django.test import Client

from access.models import NamespaceGrant


def login(username: str, groups: Sequence[str] = ()) -> Client:
    user = User.objects.create_user(username, password="pw")
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    client = Client()
    client.force_login(user)
    return client


def admin_and_alice() -> dict[str, Client]:
    """A platform admin, and ``alice`` of team ml-training, which sees only that namespace."""
    NamespaceGrant.objects.create(group=Group.objects.create(name="ml-training"), namespace="ml-training")
    return {"admin": login("admin", ["platform-admins"]), "alice": login("alice", ["ml-training"])}
