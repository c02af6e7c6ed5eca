"""Code analysis for every supported language, behind one cached function.

``analyse_code`` normalises the text (NFKC), checks for look-alike letters,
then parses it once with the language's analyser. Results are cached by
(language, code): a proposal is assessed when it is submitted and the same
code is often proposed again.
"""

from __future__ import annotations

from functools import lru_cache

from approvals.policy.risk.base import Finding
from approvals.policy.risk.bash import analyse_bash
from approvals.policy.risk.javascript import analyse_javascript
from approvals.policy.risk.python import analyse_python
from approvals.policy.risk.text import lookalike_findings, normalise

LANGUAGES = ("python", "bash", "javascript")
CACHED_UP_TO = 20_000  # characters; a few big scripts must not pin memory
_ALIASES = {
    "py": "python",
    "python3": "python",
    "sh": "bash",
    "shell": "bash",
    "js": "javascript",
    "node": "javascript",
}


def analyse_code(language: str, code: str) -> tuple[Finding, ...]:
    """Findings for ``code`` in ``language``; never raises for any text."""
    if not isinstance(code, str):
        return (Finding(5, "the code is not text; treated as opaque"),)
    if not isinstance(language, str):
        language = ""
    language = _ALIASES.get(language.strip().lower(), language.strip().lower())
    if len(code) > CACHED_UP_TO:
        return _analyse(language, code)
    return _analyse_cached(language, code)


@lru_cache(maxsize=512)
def _analyse_cached(language: str, code: str) -> tuple[Finding, ...]:
    return _analyse(language, code)


def _analyse(language: str, code: str) -> tuple[Finding, ...]:
    findings = lookalike_findings(code)
    text = normalise(code)
    if "\x00" in text:
        findings.append(Finding(5, "contains NUL bytes (hides text from tools)"))
    if language == "python":
        findings += analyse_python(text, shell=analyse_bash)
    elif language == "bash":
        findings += analyse_bash(text)
    elif language == "javascript":
        findings += analyse_javascript(text)
    else:
        findings.append(
            Finding(6, f"code in an unknown language ({language[:20]!r}) cannot be analysed")
        )
    return tuple(findings)
