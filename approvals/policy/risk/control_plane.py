"""Signals that code is after Airlock's own control plane.

Code that carries a database client, talks to a loopback address, or names
Airlock's data dir, database or checkout is reaching for what approves it:
its proposals, its policy, its queue. The sandbox keeps all of these out of
reach (tests/executions/test_control_plane.py); these findings only make sure
a person looks before such code runs. A signal, never the boundary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from approvals.policy.risk.base import Finding, RiskScorer
from approvals.policy.risk.text import normalise, short

# Clients of the databases and brokers Airlock runs on, per language.
_PYTHON_CLIENT = re.compile(
    r"\b(?:import|from)\s+(sqlite3|psycopg2?|psycopg_pool|asyncpg|pg8000|redis|aioredis|"
    r"valkey|pymysql|MySQLdb|sqlalchemy|peewee|pymongo|kombu|celery|amqp|pika)\b"
)
_JS_CLIENT = re.compile(
    r"""(?:require\s*\(|from|import)\s*['"](sqlite3|better-sqlite3|pg|postgres|redis|ioredis|"""
    r"""mysql2?|mongodb|amqplib)['"]"""
)
_SHELL_CLIENT = re.compile(
    r"(?:^|[\s;|&(`$])(sqlite3|psql|pg_dump|pg_dumpall|redis-cli|valkey-cli|mysql|mongosh?)"
    r"(?=$|[\s;|&)`])",
    re.MULTILINE,
)
_CLIENTS = {"python": (_PYTHON_CLIENT,), "javascript": (_JS_CLIENT,), "bash": (_SHELL_CLIENT,)}
_LOOPBACK = re.compile(
    r"(?<![\w.])(?:127(?:\.\d{1,3}){3}|localhost|0\.0\.0\.0|ip6-localhost)(?![\w-])"
    r"|(?<![\w:])::1(?![\w:])"
)
_SOCKET_PATHS = ("/var/run/postgresql", "/run/postgresql", "/var/run/redis", "/run/redis")
_PATH_END = r"(?=$|[/\s'\"`;:,)\]}])"


class ControlPlaneScorer(RiskScorer):
    """Database clients, loopback addresses and Airlock's own paths in code or commands."""

    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        if action in ("script.execute", "sandbox.execute"):
            language = str(parameters.get("language", "python") or "python").lower()
            text = parameters.get("code", "")
        elif action == "host.exec":
            language, text = "bash", parameters.get("command", "")
            if isinstance(text, list | tuple):
                text = " ".join(str(part) for part in text)
        else:
            return []
        if not isinstance(text, str) or not text:
            return []
        return self.scan(language, normalise(text))

    def scan(self, language: str, text: str) -> list[Finding]:
        findings = []
        patterns = _CLIENTS.get(language, (_PYTHON_CLIENT, _JS_CLIENT, _SHELL_CLIENT))
        clients = sorted({m.group(1) for p in patterns for m in p.finditer(text)})
        if clients:
            findings.append(
                Finding(
                    5,
                    f"uses a database client ({', '.join(clients)}): Airlock's own database "
                    "and broker are reached this way",
                )
            )
        if match := _LOOPBACK.search(text):
            findings.append(
                Finding(
                    5,
                    f"talks to a loopback address ({match.group(0)}): the console, Redis "
                    "and PostgreSQL listen there",
                )
            )
        for what, path in own_paths():
            if re.search(re.escape(path) + _PATH_END, text):
                findings.append(Finding(7, f"names Airlock's own {what} ({short(path)})"))
                break
        return findings


def own_paths() -> list[tuple[str, str]]:
    """(what, path) of Airlock's own places on this host, most specific first."""
    paths = []
    database = settings.DATABASES["default"]
    if "sqlite" in database["ENGINE"]:  # Django's backend or infrastructure.sqlite, Airlock's
        paths.append(("database", str(database["NAME"])))
    paths.append(("data dir", str(Path(settings.DATA_DIR).resolve())))
    paths.append(("data dir", str(settings.DATA_DIR)))
    paths.append(("checkout", str(settings.BASE_DIR)))
    paths += [("database socket", path) for path in _SOCKET_PATHS]
    return [(what, path.rstrip("/")) for what, path in paths if len(path) > 1]
