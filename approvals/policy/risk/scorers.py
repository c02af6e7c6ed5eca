"""The built-in scorers: code, host commands, and the rules of the other actions.

Each looks only at the actions it knows and returns no findings for the rest,
so the list in ``RISK_SCORERS`` can grow without the scorers knowing of each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from approvals.policy.risk.analysis import analyse_code
from approvals.policy.risk.base import Finding, RiskScorer

# Names of things others depend on: stopping them takes more than one service down.
_CRITICAL = re.compile(
    r"(?i)(?:^|[-_.@/])(?:sshd?|docker|dockerd|containerd|systemd[\w-]*|init|dbus|networking|"
    r"network-?manager|firewalld|ufw|kubelet|etcd|postgres(?:ql)?|mysql|mariadb|mongo(?:d|db)?|"
    r"redis|airlock|traefik|nginx|haproxy|vault)(?:$|[-_.@0-9])"
)


class CodeScorer(RiskScorer):
    """Static analysis of the code of ``script.execute`` and ``sandbox.execute``."""

    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        if action == "script.execute":
            language = parameters.get("language", "")
        elif action == "sandbox.execute":
            language = parameters.get("language", "python")
        else:
            return []
        return list(analyse_code(language, parameters.get("code", "")))


class HostCommandScorer(RiskScorer):
    """Analyses ``host.exec`` command lines as Bash (the worker runs them without a shell,
    but the analysis reads them as the most a shell could make of them)."""

    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        if action != "host.exec":
            return []
        command = parameters.get("command", "")
        if isinstance(command, list | tuple):
            command = " ".join(str(part) for part in command)
        return list(analyse_code("bash", command))


class ActionRulesScorer(RiskScorer):
    """Rules for container, service and process actions: what their parameters add."""

    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        if action.startswith("docker."):
            return self._docker(action, str(parameters.get("container", "") or ""))
        if action.endswith("_service"):
            return self._service(action, str(parameters.get("service_name", "") or ""))
        if action == "host.kill_process":
            return self._kill(str(parameters.get("target", "") or ""), parameters.get("signal"))
        return []

    def _docker(self, action: str, container: str) -> list[Finding]:
        verb = action.removeprefix("docker.")
        findings = []
        if verb == "stop_container":
            findings.append(
                Finding(2, f"stops the container {container} (what it serves goes down)")
            )
        elif verb == "restart_container":
            findings.append(Finding(1, f"restarts the container {container} (a brief outage)"))
        if verb in ("stop_container", "restart_container") and _CRITICAL.search(container):
            findings.append(Finding(4, f"{container} looks like infrastructure others depend on"))
        return findings

    def _service(self, action: str, service: str) -> list[Finding]:
        verb = action.removeprefix("host.").removesuffix("_service")
        findings = []
        if verb == "stop":
            findings.append(Finding(2, f"stops the service {service} (what it serves goes down)"))
        elif verb == "restart":
            findings.append(Finding(1, f"restarts the service {service} (a brief outage)"))
        if verb in ("stop", "restart") and _CRITICAL.search(service):
            findings.append(Finding(4, f"{service} looks like infrastructure others depend on"))
        return findings

    def _kill(self, target: str, signal: Any) -> list[Finding]:
        findings = []
        if str(signal).upper() in ("SIGKILL", "KILL", "9"):
            findings.append(Finding(3, "uses SIGKILL (the process cannot clean up)"))
        if target.strip() in ("1", "init", "systemd"):
            findings.append(Finding(9, f"targets {target} (PID 1: the whole host goes down)"))
        elif _CRITICAL.search(target):
            findings.append(Finding(5, f"targets {target}, which others depend on"))
        if target and not target.strip().isdigit():
            findings.append(Finding(2, f"kills by name ({target} may match several processes)"))
        return findings
