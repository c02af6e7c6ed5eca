"""JSON Schema for MCP tool inputs, made from DRF serializers.

An action's parameters are declared once, as the DRF serializer that
validates them; a tool's input schema is read off that serializer, so the
catalog and the tools cannot drift apart. The schema guides the model; the
serializer still decides (a value the schema lets through can be refused).
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

# JSON Schema patterns are ECMA-262 regular expressions: Python's \A and \Z
# anchors become ^ and $ (the serializer keeps the stricter Python meaning).
_PYTHON_ANCHORS = ((re.compile(r"^\\A"), "^"), (re.compile(r"\\Z$"), "$"))


def object_schema(serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
    """``{"type": "object", "properties": …, "required": […]}`` for a serializer's writable fields."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in serializer_class().fields.items():
        if field.read_only:
            continue
        properties[name] = field_schema(field)
        if field.required:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def field_schema(field: serializers.Field) -> dict[str, Any]:
    """The schema of one field: its type, bounds, choices, default and help text."""
    schema = _type_of(field)
    if field.help_text:
        schema["description"] = str(field.help_text)
    default = field.default
    if default is not empty and not callable(default):
        schema["default"] = default
    if getattr(field, "allow_null", False):
        _allow_null(schema)
    return schema


def _type_of(field: serializers.Field) -> dict[str, Any]:
    if isinstance(field, serializers.ChoiceField):
        return _choices(field)
    if isinstance(field, serializers.BooleanField):
        return {"type": "boolean"}
    if isinstance(field, serializers.IntegerField):
        return _bounded({"type": "integer"}, field, "min_value", "max_value")
    if isinstance(field, serializers.FloatField | serializers.DecimalField):
        return _bounded({"type": "number"}, field, "min_value", "max_value")
    if isinstance(field, serializers.CharField):
        return _string(field)
    if isinstance(field, serializers.ListField):
        return {"type": "array", "items": field_schema(field.child)}
    if isinstance(field, serializers.Serializer):
        return object_schema(type(field))
    return {}  # JSONField, DictField and the like: any JSON value


def _choices(field: serializers.ChoiceField) -> dict[str, Any]:
    values = list(field.choices)
    schema: dict[str, Any] = {"enum": values}
    if all(isinstance(value, str) for value in values):
        schema["type"] = "string"
    return schema


def _string(field: serializers.CharField) -> dict[str, Any]:
    schema = _bounded(
        {"type": "string"}, field, "min_length", "max_length", "minLength", "maxLength"
    )
    if not field.allow_blank and "minLength" not in schema:
        schema["minLength"] = 1
    if isinstance(field, serializers.RegexField):
        regex = next((v.regex for v in field.validators if hasattr(v, "regex")), None)
        if regex is not None:
            pattern = regex.pattern
            for anchor, replacement in _PYTHON_ANCHORS:
                pattern = anchor.sub(replacement, pattern)
            schema["pattern"] = pattern
    return schema


def _bounded(
    schema: dict[str, Any],
    field: serializers.Field,
    low: str,
    high: str,
    low_key: str = "minimum",
    high_key: str = "maximum",
) -> dict[str, Any]:
    if getattr(field, low, None) is not None:
        schema[low_key] = getattr(field, low)
    if getattr(field, high, None) is not None:
        schema[high_key] = getattr(field, high)
    return schema


def _allow_null(schema: dict[str, Any]) -> None:
    if "enum" in schema:
        schema["enum"].append(None)
    if "type" in schema:
        schema["type"] = [schema["type"], "null"]
