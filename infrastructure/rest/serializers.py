"""Validating serializers whose fields are built once per class, not once per request.

DRF gives every serializer instance its own fields by deep-copying the
declared ones, and a field's deep copy calls its ``__init__`` again (its
validators included): about half of validating a small payload. Here the
class's fields are built that way once, and each instance gets shallow
copies of them, which it binds to itself as usual. The fields' state that
the copies share (validators, choices, error messages, a list field's child)
is only read while validating.

Only for plain serializers that never change their fields per instance.
"""

from __future__ import annotations

import copy

from rest_framework import serializers


class Serializer(serializers.Serializer):
    def get_fields(self) -> dict:
        cls = type(self)
        built = cls.__dict__.get("_built_fields")  # a subclass builds its own
        if built is None:
            built = super().get_fields()
            cls._built_fields = built
        return {name: copy.copy(field) for name, field in built.items()}


class Text(serializers.CharField):
    """A CharField that takes text only: DRF's turns a number (``{"reason": 5}``) into "5"
    where a client sent something else than it meant; here it is a 400."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def refuse_unknown(data: dict, serializer, said: str = "unknown field") -> None:
    """A 400 naming every key of ``data`` that ``serializer`` has no field for: a typo must
    not pass for a setting left at its default."""
    unknown = set(data) - set(serializer.fields)
    if unknown:
        raise serializers.ValidationError({name: [said] for name in sorted(unknown)})
