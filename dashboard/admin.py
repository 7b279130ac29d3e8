from django.contrib import admin

from dashboard.models import NamespaceGrant


@admin.register(NamespaceGrant)
class NamespaceGrantAdmin(admin.ModelAdmin):
    list_display = ("group", "namespace", "cluster")
    list_filter = ("group", "cluster")
    search_fields = ("namespace", "group__name")
