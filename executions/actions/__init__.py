"""The action catalog (MISSION §2): name -> ActionSpec."""

from __future__ import annotations

from .base import ActionContext, ActionSpec

CATALOG: dict[str, ActionSpec] = {}

# Modules that register actions; each calls ``register`` at import.
_MODULES = ("scripts", "sandbox", "docker", "host")
_loaded = False


def register(spec: ActionSpec) -> ActionSpec:
    if spec.name in CATALOG:
        raise ValueError(f"action {spec.name!r} registered twice")
    CATALOG[spec.name] = spec
    return spec


def catalog() -> dict[str, ActionSpec]:
    global _loaded
    if not _loaded:
        import importlib

        for module in _MODULES:
            try:
                importlib.import_module(f"{__name__}.{module}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{module}":
                    raise
        _loaded = True
    return CATALOG


def get_action(name: str) -> ActionSpec | None:
    return catalog().get(name)


__all__ = ["ActionContext", "ActionSpec", "CATALOG", "catalog", "get_action", "register"]
