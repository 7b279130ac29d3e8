"""Stored history: clusters, snapshot runs, and change-only object versions."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Cluster(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class SnapshotQuerySet(models.QuerySet["Snapshot"]):
    def usable(self) -> SnapshotQuerySet:
        """The runs history reads: complete and partial ones (a running or failed one stored nothing to read)."""
        return self.filter(status__in=Snapshot.USABLE)


class Snapshot(models.Model):
    """One collection from the API server, or one import of a dump."""

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        # Some objects were unreadable: what was read is stored, but nothing of
        # those kinds is recorded as deleted.
        PARTIAL = "partial"
        FAILED = "failed"

    # What history reads: a partial run's objects are as good as a complete run's (only its deletions
    # are not recorded), while a running or failed one may have stored part of a batch.
    USABLE = (Status.OK, Status.PARTIAL)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="snapshots")
    at = models.DateTimeField(help_text="The time the snapshot describes.")
    started = models.DateTimeField()
    finished = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    objects_seen = models.PositiveIntegerField(default=0)
    versions_written = models.PositiveIntegerField(default=0)
    deletions = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    objects = SnapshotQuerySet.as_manager()

    class Meta:
        indexes = [
            # The snapshots list (newest first) and "latest snapshot as of T" lookups.
            models.Index(fields=["cluster", "-at"], name="snapshot_cluster_at"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} @ {self.at.isoformat()} ({self.status})"

    @property
    def usable(self) -> bool:
        return self.status in self.USABLE

    @property
    def changed(self) -> bool:
        """Whether it stored anything: a version or a deletion (history is change-only)."""
        return bool(self.versions_written or self.deletions)


class ObjectVersion(models.Model):
    """One state of one object, valid from ``valid_from`` until ``valid_to``.

    A row is written only when an object's content (without resourceVersion,
    managedFields and heartbeat noise) changes; a row with ``deleted`` marks the
    object's disappearance from a complete snapshot.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="versions")
    kind = models.CharField(max_length=32)
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253, blank=True)
    name = models.CharField(max_length=253)
    content_hash = models.CharField(max_length=32, blank=True)
    content = models.TextField(blank=True, help_text="Canonical JSON of the object; empty for a deletion.")
    deleted = models.BooleanField(default=False)
    snapshot = models.ForeignKey(Snapshot, on_delete=models.PROTECT, related_name="versions")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    shapes_checked = models.IntegerField(
        null=True,
        blank=True,
        help_text="collector.shapes.door_mark() of the check the content passed when written; null: stored "
        "before the door checked (readers check such a version, or one marked by other code, again).",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "uid", "valid_from"], name="objectversion_identity_time"
            ),
        ]
        indexes = [
            # Ingest compares every incoming object's hash with its head version:
            # the heads of one cluster are the rows not yet superseded.
            models.Index(
                fields=["cluster", "kind", "uid"],
                name="objectversion_head",
                condition=Q(valid_to__isnull=True),
            ),
            # State as of T: versions with valid_from <= T < valid_to, per kind.
            models.Index(fields=["cluster", "kind", "valid_to", "valid_from"], name="objectversion_asof"),
            # A Pod or claim by name, across all its incarnations (UIDs).
            models.Index(fields=["cluster", "kind", "namespace", "name"], name="objectversion_by_name"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.uid}) from {self.valid_from.isoformat()}"


class WriterLease(models.Model):
    """Who is writing a cluster's history (a collection or an import), until when.

    One writer at a time per cluster in every mode: the embedded scheduler, Celery's workers and the
    commands (``collector.locks.HistoryLease``). A row in the database rather than a Redis key, so it
    holds on SQLite without Redis too; ``expires`` frees the lease of a process killed mid-run.
    """

    cluster = models.CharField(max_length=63, primary_key=True, help_text="The cluster's name.")
    token = models.CharField(max_length=32, blank=True, help_text="The holder's; empty while free.")
    holder = models.CharField(max_length=200, blank=True, help_text="What holds it, where (host and pid).")
    since = models.DateTimeField(null=True, blank=True)
    expires = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.cluster}: {self.holder or 'free'}"
