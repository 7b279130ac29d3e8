from django.contrib import admin

from collector.models import Cluster, Snapshot


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ("name", "created")


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    list_display = ("cluster", "at", "source", "status", "objects_seen", "versions_written", "deletions")
    list_filter = ("cluster", "status")
