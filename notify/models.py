"""Notices derived when a snapshot is written, who receives them, and every attempt to deliver one.

A notice row is written once per subject while its condition lasts (the open
notice is unique); sending reads what was stored, never the history again.
"""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from collector.models import Cluster


class Notice(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(max_length=32)
    subject = models.CharField(max_length=253, help_text="A claim or Pod UID, a node or cluster name.")
    reason = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253, blank=True, help_text="Empty: cluster-wide, platform only.")
    name = models.CharField(max_length=507, blank=True)
    message = models.TextField()
    link = models.CharField(max_length=1000, blank=True)
    first_seen = models.DateTimeField(help_text="The snapshot time the condition was first seen.")
    created = models.DateTimeField(auto_now_add=True)
    resolved = models.DateTimeField(null=True, blank=True, help_text="The snapshot time it no longer held.")
    dispatched = models.DateTimeField(null=True, blank=True, help_text="When its deliveries were queued.")

    class Meta:
        constraints = [
            # Once per subject and reason while it lasts: a second detection of the same
            # condition (another collection, a concurrent worker) inserts nothing.
            models.UniqueConstraint(
                fields=["cluster", "kind", "subject", "reason"],
                condition=Q(resolved__isnull=True),
                name="notice_open_once",
            ),
        ]
        indexes = [
            # The alert loop reads only notices not yet dispatched: a handful, however long the history.
            models.Index(fields=["created"], name="notice_undispatched", condition=Q(dispatched__isnull=True)),
            # The notices page, newest first.
            models.Index(fields=["cluster", "-first_seen"], name="notice_cluster_seen"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.kind} {self.name or self.subject}: {self.reason}"


class Receiver(models.Model):
    """A team's (or, without a group, the platform's) webhook and e-mail addresses."""

    class Format(models.TextChoices):
        JSON = "json", "generic JSON"
        SLACK = "slack", "Slack-compatible ({\"text\": …})"

    name = models.CharField(max_length=100, unique=True)
    group = models.ForeignKey(
        Group,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="notice_receivers",
        help_text="Notices about the namespaces granted to this group. Empty: every notice (platform).",
    )
    webhook_url = models.URLField(max_length=1000, blank=True)
    webhook_format = models.CharField(max_length=8, choices=Format.choices, default=Format.JSON)
    emails = models.TextField(blank=True, help_text="Addresses separated by commas or whitespace.")
    enabled = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.name

    def email_list(self) -> list[str]:
        return [a for a in self.emails.replace(",", " ").split() if a]


class Delivery(models.Model):
    """One notice to one receiver's channel, with every attempt counted."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RETRYING = "retrying"
        SENT = "sent"
        FAILED = "failed"

    notice = models.ForeignKey(Notice, on_delete=models.CASCADE, related_name="deliveries")
    # Empty for the receivers configured by environment (CLAIMLINE_NOTIFY_*).
    receiver = models.ForeignKey(Receiver, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries")
    target = models.CharField(max_length=120, help_text="Which receiver and channel, e.g. env/webhook.")
    channel = models.CharField(max_length=16)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    last_attempt = models.DateTimeField(null=True, blank=True)
    next_attempt = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["notice", "target"], name="delivery_once_per_target"),
        ]
        indexes = [
            # Deliveries still due (the in-process loop's retries): sent and failed rows are never read here.
            models.Index(
                fields=["next_attempt"], name="delivery_due", condition=Q(status__in=["pending", "retrying"])
            ),
            # A receiver's latest attempts, for "which receivers are failing".
            models.Index(fields=["target", "-last_attempt"], name="delivery_target_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.target} ← notice {self.notice_id}: {self.status} after {self.attempts} attempts"


class Scan(models.Model):
    """The last snapshot whose notices were derived, per cluster (decides when to look again)."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, primary_key=True, related_name="notice_scan")
    at = models.DateTimeField(help_text="The snapshot time scanned.")
    finished = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster} scanned as of {self.at.isoformat()}"
