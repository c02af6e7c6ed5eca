"""Policy as code: the policy as YAML text, exported and applied.

YAML rather than TOML: PyYAML both reads and writes it (TOML would need a
second package to write), lists of rules read naturally as lists, and an admin
may keep comments in the file. The export is canonical (fixed key order,
agents sorted, one comment per setting), so export → apply → export gives the
same text byte for byte.

Applying validates with the editor's ``PolicySerializer`` and refuses the
whole file, with a line and a field for each problem, before anything is
written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import zip_longest

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, Node, SequenceNode

from approvals.policy.models import PolicyVersion
from approvals.policy.rules import (
    OVERRIDABLE,
    OverrideSerializer,
    Policy,
    PolicySerializer,
    RuleSerializer,
    SlackRouteSerializer,
    ToolRiskSerializer,
    current_policy,
    update_policy,
)
from approvals.routing.document import RouteSerializer, TeamSerializer

HEADER = (
    "# Airlock policy. Apply with `manage.py policy apply FILE` or "
    "POST /api/v1/policy/apply;\n"
    "# each apply is a new, audited version. Lists are globs, first match wins: "
    "deny, then allow, then notify.\n"
)
LIST_COMMENTS = {
    "deny": "denied outright",
    "allow": "approved and run",
    "notify": "approved, run, and reviewers notified",
}
RULE_LISTS = tuple(LIST_COMMENTS)
TOOL_RISK_COMMENT = (
    "risk of tool calls (tool.call), by tool (a glob): without argument its base risk, first "
    "match; with argument and one of above, matches, not_matches, a finding when it holds"
)
TEAMS_COMMENT = (
    "who decides: team → members (usernames) and/or sso_groups (the identity provider's "
    "groups, read at each sign-in), optional slack_channel and email"
)
REVIEWS_COMMENT = (
    "review routes, first match wins: match (kind:glob, all must hold), optional "
    "risk_at_least, require {team: approvals}, optional escalate_after_minutes with "
    "escalate_to [teams]; require replaces the risk quorum, never asking for fewer approvals"
)
ROUTES_COMMENT = (
    "Slack channels for review requests, first match wins "
    "(bands: low, medium, high, none = any; agent and action are globs)"
)


class PolicyTextError(ValueError):
    """A policy file that cannot be applied; ``problems`` holds one line per fault."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


# --- export ------------------------------------------------------------------------


def canonical(data: dict) -> dict:
    """A stored policy document, complete and in the export's order."""
    document = Policy.from_data(0, data).as_data()
    document["agent_overrides"] = {
        name: {key: values[key] for key in OVERRIDABLE if key in values}
        for name, values in sorted(document["agent_overrides"].items())
    }
    return document


def export_text(data: dict) -> str:
    """The policy document as YAML: each setting under a comment that says what it does."""
    helps = {n: f.help_text for n, f in PolicySerializer().fields.items() if f.help_text}
    parts = [HEADER]
    for key, value in canonical(data).items():
        comment = LIST_COMMENTS.get(key) or helps.get(key)
        if key == "agent_overrides":
            comment = "per agent: " + ", ".join(OVERRIDABLE)
        if key == "slack_routes":
            comment = ROUTES_COMMENT
        if key == "tool_risk":
            comment = TOOL_RISK_COMMENT
        if key == "teams":
            comment = TEAMS_COMMENT
        if key == "reviews":
            comment = REVIEWS_COMMENT
        parts.append(f"\n# {comment}\n" if comment else "\n")
        parts.append(_dump({key: value}))
    return "".join(parts)


def _dump(value: dict) -> str:
    return yaml.safe_dump(
        value, sort_keys=False, default_flow_style=False, allow_unicode=True, width=10_000
    )


def version_text(version: int | None = None) -> str:
    """Stored version ``version`` (the one in force when None) as YAML; KeyError if absent."""
    if version is None:
        return export_text(current_policy().as_data())
    stored = PolicyVersion.objects.filter(version=version).first()
    if stored is None:
        raise KeyError(version)
    return export_text(stored.data)


# --- apply -------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """Safe YAML without aliases: a few nested ``*refs`` can expand into billions of items."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(
                None, None, "aliases (*name) are not accepted in a policy", event.start_mark
            )
        return super().compose_node(parent, index)


def parse(text: str) -> dict:
    """The validated policy document the text describes, or ``PolicyTextError``."""
    node, data = _load(text)
    if not isinstance(data, dict):
        raise PolicyTextError(["line 1: expected the policy's settings (deny:, allow:, …)"])
    problems = list(_duplicate_keys(node)) + list(_unknown_keys(data, node))
    serializer = PolicySerializer(data=data)
    if not serializer.is_valid():
        problems += [_located(node, path, message) for path, message in _faults(serializer.errors)]
    if problems:
        raise PolicyTextError(problems)
    return json.loads(json.dumps(serializer.validated_data))


def apply_text(text: str, user=None, comment: str = "", actor: str | None = None):
    """Validate the text and put it in force as a new, audited version (nothing on error)."""
    return update_policy(parse(text), user, comment, actor=actor)


def _load(text: str) -> tuple[Node | None, object]:
    loader = None
    try:
        loader = _Loader(text)  # refuses characters YAML does not allow (a control character)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PolicyTextError([f"{where}{exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise PolicyTextError([f"not YAML: {exc}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return node, data


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _duplicate_keys(node: Node | None, path: tuple = ()) -> Iterator[str]:
    if isinstance(node, MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen:
                yield f"line {_line(key)}, {_label(path + (key.value,))}: given twice"
            seen.add(key.value)
            yield from _duplicate_keys(value, path + (key.value,))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, path + (i,))


def _unknown_keys(data: dict, node: Node | None) -> Iterator[str]:
    """Keys the serializer would silently drop: a typo must not pass for a setting."""
    yield from _unknown(data, set(PolicySerializer().fields), node, ())
    rule_fields = set(RuleSerializer().fields)
    for name in RULE_LISTS:
        rules = data.get(name)
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if isinstance(rule, dict):
                yield from _unknown(rule, rule_fields, node, (name, i))
    routes = data.get("slack_routes")
    route_fields = set(SlackRouteSerializer().fields)
    for i, route in enumerate(routes if isinstance(routes, list) else []):
        if isinstance(route, dict):
            yield from _unknown(route, route_fields, node, ("slack_routes", i))
    tools = data.get("tool_risk")
    tool_fields = set(ToolRiskSerializer().fields)
    for i, rule in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(rule, dict):
            yield from _unknown(rule, tool_fields, node, ("tool_risk", i))
    teams = data.get("teams")
    team_fields = set(TeamSerializer().fields)
    for name, team in (teams if isinstance(teams, dict) else {}).items():
        if isinstance(team, dict):
            yield from _unknown(team, team_fields, node, ("teams", name))
    reviews = data.get("reviews")
    review_fields = set(RouteSerializer().fields)
    for i, route in enumerate(reviews if isinstance(reviews, list) else []):
        if isinstance(route, dict):
            yield from _unknown(route, review_fields, node, ("reviews", i))
    overrides = data.get("agent_overrides")
    override_fields = set(OverrideSerializer().fields)
    for agent, values in (overrides if isinstance(overrides, dict) else {}).items():
        if isinstance(values, dict):
            yield from _unknown(values, override_fields, node, ("agent_overrides", agent))


def _unknown(data: dict, known: set, node: Node | None, path: tuple) -> Iterator[str]:
    for key in data:
        if str(key) not in known:
            where = _node_at(node, path + (key,))
            expected = ", ".join(sorted(known))
            yield (
                f"line {_line(where)}, {_label(path + (key,))}: unknown setting "
                f"(expected one of {expected})"
            )


def _faults(detail, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(path, message) for each error in a serializer's nested errors."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            yield from _faults(value, path if key == "non_field_errors" else path + (key,))
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        for i, item in enumerate(detail):
            yield from _faults(item, path + (i,))
    elif isinstance(detail, list):
        for item in detail:
            yield path, str(item)
    else:
        yield path, str(detail)


def _located(node: Node | None, path: tuple, message: str) -> str:
    where = _node_at(node, path) if node is not None else None
    label = _label(path) or "policy"
    return f"line {_line(where)}, {label}: {message}" if where else f"{label}: {message}"


def _node_at(node: Node | None, path: tuple) -> Node | None:
    """The deepest node along ``path`` (a missing field points at its parent)."""
    for part in path:
        child = _child(node, part)
        if child is None:
            break
        node = child
    return node


def _child(node: Node | None, part) -> Node | None:
    if isinstance(node, MappingNode):
        return next((value for key, value in node.value if key.value == str(part)), None)
    if isinstance(node, SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


def _label(path: tuple) -> str:
    """``allow[2].pattern``, ``agent_overrides.bot.high_risk_at`` (list items counted from 1)."""
    label = ""
    for part in path:
        label += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if label else str(part))
    return label


# --- versions side by side ---------------------------------------------------------


@dataclass(frozen=True)
class DiffRow:
    """One line of each side; a number is None where that side has no line."""

    left_number: int | None
    left: str
    right_number: int | None
    right: str
    tag: str  # equal, replace, delete (left only), insert (right only)


def side_by_side(left: str, right: str) -> list[DiffRow]:
    """Two exported texts line against line, changed lines marked."""
    a, b = left.splitlines(), right.splitlines()
    rows = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        pairs = zip_longest(range(i1, i2), range(j1, j2))
        for i, j in pairs:
            rows.append(
                DiffRow(
                    None if i is None else i + 1,
                    "" if i is None else a[i],
                    None if j is None else j + 1,
                    "" if j is None else b[j],
                    tag
                    if i is not None and j is not None
                    else ("delete" if j is None else "insert"),
                )
            )
    return rows
