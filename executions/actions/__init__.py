"""The action catalog (MISSION §2): name -> ActionSpec.

Each module of the package describes a family of actions (``scripts``,
``sandbox``, ``docker``, ``host``, ``tools``) as ``ACTIONS``, a list of ``ActionSpec``
(``base``); the catalog is their union, in this order. A new family is a
module of its own with its ``ACTIONS``, added to ``FAMILIES`` below.
"""

from __future__ import annotations

from . import docker, host, sandbox, scripts, tools
from .base import ActionContext, ActionSpec

FAMILIES = (scripts, sandbox, docker, host, tools)


def _catalog() -> dict[str, ActionSpec]:
    found: dict[str, ActionSpec] = {}
    for family in FAMILIES:
        for spec in family.ACTIONS:
            if spec.name in found:
                raise ValueError(f"action {spec.name!r} is described twice")
            found[spec.name] = spec
    return found


CATALOG: dict[str, ActionSpec] = _catalog()


def catalog() -> dict[str, ActionSpec]:
    return CATALOG


def get_action(name: str) -> ActionSpec | None:
    return CATALOG.get(name)


def target_text(action: str, parameters: dict) -> str:
    """What a proposal acts on, in words: "container web-1", "service nginx · host host-a",
    "tool billing.refund"; "" for a script (it runs in the sandbox) or an unknown action."""
    spec = CATALOG.get(action)
    shown = spec.shown_targets(parameters) if spec and isinstance(parameters, dict) else {}
    return " · ".join(f"{kind} {value}" for kind, value in shown.items())


__all__ = ["ActionContext", "ActionSpec", "CATALOG", "catalog", "get_action", "target_text"]
