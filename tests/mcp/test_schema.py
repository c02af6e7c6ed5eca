"""Tool input schemas are read off the DRF serializers that validate the same input."""

from __future__ import annotations

import re

import pytest
from rest_framework import serializers

from approvals.agents.mcp.calls import all_tools
from approvals.agents.mcp.schema import object_schema
from approvals.agents.mcp.tools import Catalog, EnvelopeArguments, ToolDef
from executions.actions import ActionSpec, catalog


class Example(serializers.Serializer):
    name = serializers.RegexField(r"\A[a-z]+\Z", max_length=20, help_text="A name.")
    size = serializers.IntegerField(min_value=1, max_value=9, default=3)
    colour = serializers.ChoiceField(choices=["red", "blue"], allow_null=True, required=False)
    notes = serializers.CharField(allow_blank=True, required=False)
    flags = serializers.ListField(child=serializers.BooleanField(), required=False)
    extra = serializers.JSONField(required=False)
    secret = serializers.CharField(read_only=True)


def test_it_turns_each_field_into_its_json_schema():
    assert object_schema(Example) == {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "maxLength": 20,
                "minLength": 1,
                "pattern": "^[a-z]+$",
                "description": "A name.",
            },
            "size": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
            "colour": {"enum": ["red", "blue", None], "type": ["string", "null"]},
            "notes": {"type": "string"},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "extra": {},
        },
        "required": ["name"],
        "additionalProperties": False,
    }


def test_every_action_of_the_catalog_gets_a_tool_with_a_valid_pattern():
    tools = Catalog(all_tools())
    for spec in catalog().values():
        schema = tools.input_schema(spec.name.replace(".", "_"))
        if spec.reported:  # carried out by the agent: no result for a tool call to wait for
            assert schema is None, spec.name
            continue
        assert schema is not None, spec.name
        assert set(object_schema(spec.serializer)["properties"]) <= set(schema["properties"])
        for field in schema["properties"].values():
            if "pattern" in field:
                assert "\\A" not in field["pattern"] and "\\Z" not in field["pattern"]
                re.compile(field["pattern"])


def test_it_refuses_an_action_parameter_named_like_an_envelope_argument():
    class Clashing(serializers.Serializer):
        reason = serializers.CharField()

    spec = ActionSpec("demo.clash", "clashes", Clashing, base_risk=1, runner=lambda p, c: None)
    tool = ToolDef("demo_clash", "", EnvelopeArguments, run=None, audience="agent", spec=spec)
    with pytest.raises(ValueError, match="parameters named like envelope arguments"):
        Catalog([tool])
