"""Every API error is ``{"error": {"type", "message"}}`` with the right 4xx.

Two layers: DRF's exception handler shapes what views raise, and
``api_error_middleware`` shapes everything that happens outside a view under
``/api/`` (a body over the size limit, too many fields, a bad Host header, an
unknown route, Django's own error pages in DEBUG).

The database being away (restarting, unreachable, no pooled connection in
time) is no fault of the client's: a 503 ``service_unavailable`` with
Retry-After. Nothing was written (a failed transaction rolls back), and the
pool replaces broken connections, so the next call after it returns works.
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.views import exception_handler as drf_exception_handler

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
# What Django raises when the database cannot be reached or drops the connection.
DATABASE_AWAY = (OperationalError, InterfaceError)
RETRY_AFTER_SECONDS = 5

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
    """An error with an explicit type and status; ``extra`` fields go into its body (a ``url``)."""

    def __init__(self, status_code: int, error_type: str, message: str, **extra):
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type
        self.extra = extra


def _message(detail) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _message(value)
            parts.append(text if field in ("non_field_errors", "detail") else f"{field}: {text}")
        return _joined(parts)
    if isinstance(detail, list):
        return _joined([_message(item) for item in detail])
    return str(detail)


def _joined(parts: list[str]) -> str:
    """One sentence per problem: "a: is required; b: is too long" (no ".;")."""
    return parts[0] if len(parts) == 1 else "; ".join(part.rstrip(".") for part in parts)


class ErrorDetail(serializers.Serializer):
    type = serializers.CharField(help_text="what went wrong, e.g. step_up_required")
    message = serializers.CharField(help_text="for a person to read")
    url = serializers.URLField(
        required=False, help_text="where to complete it (step_up_required: a console page)"
    )
    details = serializers.JSONField(required=False, help_text="validation errors, field by field")


class ErrorSerializer(serializers.Serializer):
    """Every error: ``{"error": {"type", "message"}}``, for the published schema."""

    error = ErrorDetail()


def error_responses(**described: str) -> dict[int, OpenApiResponse]:
    """Schema responses for the errors of an endpoint: ``error_responses(e403="...")``."""
    return {
        int(code.removeprefix("e")): OpenApiResponse(ErrorSerializer, description=text)
        for code, text in described.items()
    }


def error_body(error_type: str, message: str, details=None) -> dict:
    body = {"type": error_type, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def database_unavailable(exc: Exception) -> JsonResponse:
    """The 503 for a call that failed because the database is away."""
    log.warning("database unavailable: %s", str(exc).strip() or type(exc).__name__)
    response = json_error(
        503,
        "service_unavailable",
        "the database is unavailable; nothing was changed, retry shortly",
    )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def exception_handler(exc, context):
    if isinstance(exc, DATABASE_AWAY):
        return database_unavailable(exc)
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
    response.data["error"].update(getattr(exc, "extra", None) or {})
    return response


def json_error(status_code: int, error_type: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(error_type, message), status=status_code)


def get_or_404(queryset, pk: int, noun: str):
    """The object, or a 404 that names what was looked for."""
    found = next(iter(queryset.filter(pk=pk).order_by()[:1]), None)  # unique: no ORDER BY
    if found is None:
        raise ApiError(404, "not_found", f"{noun} {pk} does not exist or is not visible to you")
    return found


# --- outside the views -----------------------------------------------------------------

TYPE_FOR_STATUS = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def refusal(request: HttpRequest) -> JsonResponse | None:
    """What Django would refuse about this request before any view, as a JSON error."""
    try:
        request.get_host()
        request.GET  # noqa: B018 - parses the query string, which has a field limit
        request.body  # noqa: B018 - reads the body, which has a size limit
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return json_error(
            413, "request_too_large", f"the request body is larger than the limit of {limit} bytes"
        )
    except (TooManyFieldsSent, TooManyFilesSent) as exc:
        return json_error(400, "too_many_fields", str(exc))
    except DisallowedHost as exc:
        return json_error(400, "bad_host", str(exc))
    except SuspiciousOperation as exc:
        return json_error(400, "bad_request", str(exc))
    return None


def as_json_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """An error response that is not already JSON (an HTML page, YAML) in the JSON shape."""
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    status = response.status_code
    if status == 404:
        message = f"no such endpoint: {request.path}"
    elif status == 405:
        message = f"method {request.method} is not allowed on {request.path}"
    elif status >= 500:
        message = "internal error; it has been logged"
    else:
        try:
            message = HTTPStatus(status).phrase
        except ValueError:  # a status http.HTTPStatus does not name
            message = "error"
    error_type = TYPE_FOR_STATUS.get(status, "server_error" if status >= 500 else "error")
    converted = json_error(status, error_type, message)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            converted[header] = response[header]
    return converted


def _database_away(request: HttpRequest, exception: Exception) -> JsonResponse | None:
    """Django's ``process_exception`` hook: a view outside DRF that lost the database."""
    if request.path.startswith(API_PREFIX) and isinstance(exception, DATABASE_AWAY):
        return database_unavailable(exception)
    return None


@sync_and_async_middleware
def api_error_middleware(get_response):
    """Under /api/, refusals and error pages from outside the views answer in the JSON shape."""
    middleware = _api_error_middleware(get_response)
    middleware.process_exception = _database_away
    return middleware


def _api_error_middleware(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request):
            if not request.path.startswith(API_PREFIX):
                return await get_response(request)
            refused = refusal(request)
            if refused is not None:
                return refused
            return as_json_error(request, await get_response(request))

    else:

        def middleware(request):
            if not request.path.startswith(API_PREFIX):
                return get_response(request)
            refused = refusal(request)
            if refused is not None:
                return refused
            return as_json_error(request, get_response(request))

    return middleware
