"""Every API error is ``{"error": {"type", "message"}}`` with the right 4xx."""

from __future__ import annotations

from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

TYPES = {
    exceptions.ParseError: "parse_error",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "validation_error",
}


class ApiError(exceptions.APIException):
    """An error with an explicit type and status."""

    def __init__(self, status_code: int, error_type: str, message: str):
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


def _message(detail) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _message(value)
            parts.append(text if field in ("non_field_errors", "detail") else f"{field}: {text}")
        return "; ".join(parts)
    if isinstance(detail, list):
        return "; ".join(_message(item) for item in detail)
    return str(detail)


def error_body(error_type: str, message: str, details=None) -> dict:
    body = {"type": error_type, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    error_type = getattr(exc, "error_type", None) or next(
        (name for cls, name in TYPES.items() if isinstance(exc, cls)),
        getattr(exc, "default_code", "error"),
    )
    details = exc.detail if isinstance(exc, exceptions.ValidationError) else None
    response.data = error_body(error_type, _message(getattr(exc, "detail", str(exc))), details)
    return response


def json_error(status_code: int, error_type: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(error_type, message), status=status_code)


def get_or_404(queryset, pk: int, noun: str):
    """The object, or a 404 that names what was looked for."""
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise ApiError(404, "not_found", f"{noun} {pk} does not exist or is not visible to you")
    return found
