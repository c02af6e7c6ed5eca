from django.contrib import admin

from .models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["seq", "created_at", "actor", "verb", "object_type", "object_id"]
    list_filter = ["verb", "object_type"]
    search_fields = ["actor", "object_id"]

    def has_add_permission(self, request) -> bool:
        return False  # append-only: rows come from audit.services.record

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
