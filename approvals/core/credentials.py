"""Credentials in a proposal: masked wherever it is read back, the originals sealed to run.

At submission the parameters and the reason are searched
(``infrastructure.credentials``: detect-secrets' plugins, and the policy's
``secret_patterns``). What is found is masked in the stored row itself (so the
API, the console, Slack, mail, webhooks, the audit trail, archives and logs
only ever see ``AKIA…``), and the originals are sealed beside it
(``Proposal.sealed``, Fernet under the credentials key) for the run alone and
for a reviewer who reveals them (a fresh second factor, audited). The run's
output is masked as it is written, by the same values and patterns
(``executions.output``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infrastructure import credentials
from infrastructure.credentials.masking import replace


@dataclass
class Masked:
    """A proposal's parameters and reason as they are stored and shown."""

    parameters: dict
    reason: str
    found: list[credentials.Found] = field(default_factory=list)
    sealed: str | None = None  # the originals, when anything was found

    @property
    def values(self) -> list[str]:
        return [f.value for f in self.found]

    def scrub(self, obj: Any) -> Any:
        """``obj`` (text or JSON: risk reasons, a summary) with the found values masked."""
        if not self.found:
            return obj
        if isinstance(obj, str):
            return replace(obj, self.values)
        if isinstance(obj, dict):
            return {key: self.scrub(value) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.scrub(item) for item in obj]
        return obj

    def risk_reason(self) -> str | None:
        if not self.found:
            return None
        kinds = ", ".join(dict.fromkeys(f.kind for f in self.found))
        return f"carries a credential ({kinds}): masked wherever it is shown, sealed at rest"


def masked(parameters: dict, reason: str, patterns: tuple[str, ...] = ()) -> Masked:
    """The parameters and reason with their credentials masked, the originals sealed."""
    shown, found = credentials.mask_json(parameters, patterns)
    shown_reason, in_reason = credentials.mask_text(reason, [f.value for f in found], patterns)
    values = {f.value: f for f in [*found, *in_reason]}
    if not values:
        return Masked(parameters, reason)
    result = Masked(shown, shown_reason, list(values.values()))
    result.parameters = result.scrub(shown)  # a value found in the reason, in a parameter too
    result.sealed = credentials.seal(
        {"parameters": parameters, "reason": reason, "known": list(values)}
    )
    return result


def originals(sealed: str) -> dict:
    """``{"parameters", "reason", "known"}`` as the agent sent them (to run, or revealed)."""
    return credentials.unseal(sealed)
