"""The signed-in user's scope: platform admins see everything, team members their granted namespaces.

Every view resolves a scope and asks the domain's redaction helpers to keep
other teams' claim details out of what it renders; a guessed name or UID
outside the scope is a 404, never the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q
from django.http import Http404

from access.models import NamespaceGrant
from collector.history_reader import StoredHistory, namespaces_in_use
from collector.models import Cluster
from domain.reports.redaction import Redactor, Scope


def is_platform_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name=settings.CLAIMLINE_ADMIN_GROUP).exists()  # type: ignore[union-attr,attr-defined]


def scope_for(user: AbstractBaseUser | AnonymousUser, cluster: Cluster) -> Scope:
    if is_platform_admin(user):
        return Scope(admin=True)
    if not user.is_authenticated:
        return Scope(admin=False, namespaces=frozenset())
    namespaces = NamespaceGrant.objects.filter(
        Q(cluster__isnull=True) | Q(cluster=cluster), group__in=user.groups.all()  # type: ignore[union-attr,attr-defined]
    ).values_list("namespace", flat=True)
    return Scope(admin=False, namespaces=frozenset(namespaces))


def require_namespace(scope: Scope, namespace: str) -> None:
    """404 for a namespaced object outside the scope: its existence is not confirmed."""
    if not scope.sees(namespace):
        raise Http404("not found")


def redactor_with(
    user: AbstractBaseUser | AnonymousUser, cluster: Cluster, namespaces: Callable[[], Iterable[str]]
) -> Redactor:
    """A redactor whose known namespaces are asked for only when the user is not a platform admin."""
    scope = scope_for(user, cluster)
    if scope.admin:
        return Redactor(scope, ())
    return Redactor(scope, namespaces())


def redactor_of(user: AbstractBaseUser | AnonymousUser, history: StoredHistory) -> Redactor:
    """A redactor without loading the state: a page that reads derived rows asks the database
    for the namespaces in use as of the snapshot (only for a user who is not a platform admin)."""
    return redactor_with(user, history.cluster, lambda: namespaces_in_use(history.cluster, history.as_of))
