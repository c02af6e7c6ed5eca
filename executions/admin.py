from django.contrib import admin

from .models import Execution


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = ["id", "action", "status", "backend", "worker_host", "exit_code", "created_at"]
    list_filter = ["status", "backend"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # state changes go through executions.services
