from django.contrib import admin

from notify.models import Delivery, Notice, Receiver


@admin.register(Receiver)
class ReceiverAdmin(admin.ModelAdmin):
    list_display = ("name", "group", "webhook_format", "enabled")
    list_filter = ("enabled", "group")
    search_fields = ("name", "group__name", "emails")


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    fields = ("target", "status", "attempts", "last_attempt", "error")
    readonly_fields = fields
    can_delete = False


@admin.register(Notice)
class NoticeAdmin(admin.ModelAdmin):
    list_display = ("cluster", "kind", "name", "reason", "first_seen", "resolved", "dispatched")
    list_filter = ("cluster", "kind", "reason")
    search_fields = ("name", "subject", "namespace", "message")
    inlines = [DeliveryInline]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("notice", "target", "status", "attempts", "last_attempt")
    list_filter = ("status", "target")
