"""What Airlock answers, typed: a proposal and an execution's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Proposal:
    id: int
    status: str  # pending, approved; or final: denied, rejected, expired, withdrawn
    action: str
    risk: int
    reasons: list[str]
    execution_id: int | None
    execution_status: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Proposal:
        return cls(
            id=data["id"],
            status=data["status"],
            action=data["action"],
            risk=data["risk"]["score"],
            reasons=list(data["risk"]["reasons"]),
            execution_id=data.get("execution_id"),
            execution_status=data.get("execution_status"),
            raw=data,
        )

    @property
    def reason(self) -> str:
        """Why it ended as it did: the agent's reason for withdrawing it, the reviewers'
        comments, else the policy's reason."""
        if self.status == "withdrawn":
            return self.raw.get("withdraw_reason") or "withdrawn by the agent"
        comments = [
            f"{d['reviewer']}: {d['comment']}" if d.get("comment") else d["reviewer"]
            for d in self.raw.get("decisions", [])
            if d.get("kind") == "reject" or self.status != "rejected"
        ]
        if comments:
            return "; ".join(comments)
        path = self.raw.get("decision_path") or {}
        return path.get("reason") or self.status


@dataclass(frozen=True)
class Result:
    execution_id: int
    status: str  # succeeded, failed, timed_out, cancelled, lost (or running, queued)
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: int | None
    error: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Result:
        return cls(
            execution_id=data["id"],
            status=data["status"],
            exit_code=data.get("exit_code"),
            stdout=data.get("stdout", ""),
            stderr=data.get("stderr", ""),
            duration_ms=data.get("duration_ms"),
            error=data.get("error", ""),
            raw=data,
        )

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"
