"""Content negotiation that skips the work when there is nothing to choose."""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation


class JSONFirstNegotiation(DefaultContentNegotiation):
    """An endpoint with one renderer answers with it, whatever ``Accept`` says.

    The agent API speaks JSON only: parsing each request's ``Accept`` header
    to choose between one renderer cost a tenth of a read. Endpoints with
    several renderers (the OpenAPI schema: YAML or JSON) negotiate as usual.
    """

    def select_renderer(self, request, renderers, format_suffix=None):
        if len(renderers) == 1 and not format_suffix:
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)
