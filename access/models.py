"""Who may see what: namespaces granted to groups."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models

from collector.models import Cluster


class NamespaceGrant(models.Model):
    """Members of ``group`` see claims, Pods and events of ``namespace`` (in one cluster, or in all)."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="namespace_grants")
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, null=True, blank=True, help_text="Empty: every cluster."
    )
    namespace = models.CharField(max_length=253)

    class Meta:
        # The table the dashboard app created: the model moved here without moving its rows
        # (access.0001 and dashboard.0002 move only Django's state).
        db_table = "dashboard_namespacegrant"
        constraints = [
            models.UniqueConstraint(fields=["group", "cluster", "namespace"], name="namespacegrant_unique"),
        ]
        indexes = [
            # Scope lookups: the grants of a user's groups.
            models.Index(fields=["group", "cluster"], name="namespacegrant_group"),
        ]

    def __str__(self) -> str:
        return f"{self.group.name} → {self.namespace} ({self.cluster or 'all clusters'})"
