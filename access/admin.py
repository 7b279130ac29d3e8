from django.contrib import admin

from access.models import NamespaceGrant


@admin.register(NamespaceGrant)
class NamespaceGrantAdmin(admin.ModelAdmin):
    list_display = ("group", "namespace", "cluster")
    list_filter = ("group", "cluster")
    search_fields = ("namespace", "group__name")
