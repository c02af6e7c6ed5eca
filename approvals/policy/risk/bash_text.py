"""Bash as text: the words that matter when a script cannot be parsed, and the
rewrites that let bashlex parse what it otherwise cannot.

``scan_text`` scores dangerous words line by line (the fallback for opaque
scripts); ``prepare`` rewrites syntax bashlex lacks (arithmetic, ``[[ … ]]``,
arrays) into shapes of the same length, so positions still point into the
original text.
"""

from __future__ import annotations

import re

from approvals.policy.risk.base import Finding

_ARITHMETIC_BODY = re.compile(r"^[\w\s+\-*/%<>=!&|^~?:,.()$#\[\]{}\"']*$")
_ARRAY_BODY = re.compile(r"^[\w\s\"'.,:/@%+=\-$*~]*$")
_TEST_OPEN = re.compile(r"(?:(?<=^)|(?<=[\s;&|(!]))\[\[(?=\s)", re.M)
_TEST_CLOSE = re.compile(r"(?<=\s)\]\](?=$|[\s;&|)])", re.M)
_ARRAY_OPEN = re.compile(r"(?:(?<=^)|(?<=[\s;&|]))[A-Za-z_][A-Za-z0-9_]*\+?=\(", re.M)

# Words that matter even when the script cannot be parsed: (first, then, points, reason).
# With a ``then`` pattern, both must appear on one line in that order. Every
# pattern is checked once per line, so the scan stays linear in the text.
_TEXT_RULES: tuple[tuple[re.Pattern[str], re.Pattern[str] | None, int, str], ...] = tuple(
    (re.compile(first), re.compile(then) if then else None, points, reason)
    for first, then, points, reason in (
        (r"\brm\s", None, 4, "deletes files (rm)"),
        (
            r"\brm\s",
            r"(?:^|\s)-[a-zA-Z]*(?:[rR][a-zA-Z]*f|f[a-zA-Z]*[rR])",
            8,
            "deletes recursively and forcibly (rm -rf)",
        ),
        (r"\b(?:sudo|doas|pkexec)\b", None, 6, "runs as root (sudo)"),
        (
            r"\b(?:curl|wget)\b",
            r"\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b",
            9,
            "pipes a download into a shell (curl … | sh)",
        ),
        (r"\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b", None, 7, "pipes text into a shell"),
        (
            r"/dev/(?:tcp|udp)/",
            None,
            9,
            "opens a raw network connection through /dev/tcp (reverse shell)",
        ),
        (r"\bmkfs", None, 10, "formats a filesystem (mkfs)"),
        (r"\bdd\b", r"\bof=/dev/", 10, "writes raw data to a device (dd of=/dev/…)"),
        (r">\s*/(?:etc|boot|usr|bin|sbin|lib|root)/", None, 8, "writes under a system directory"),
        (r"\bchmod\s", r"\b0?777\b", 6, "makes files world-writable (chmod 777)"),
        (r"\beval\b", None, 6, "evaluates a string as code (eval)"),
        (r"\bbase64\s", r"\s(?:-d|--decode|-D)\b", 4, "decodes base64 (can hide a payload)"),
        (
            r"\b(?:nc|ncat|netcat)\b",
            r"\s-[ec]\b",
            9,
            "netcat runs a program for the network (reverse shell)",
        ),
        (r"\b(?:ba|z|da|k)?sh\s+-i\b", None, 7, "starts an interactive shell (bash -i)"),
        (r"\\x[0-9a-fA-F]{2}", None, 5, "uses escape sequences that can hide text"),
        (r"\b(?:shutdown|reboot|halt|poweroff)\b", None, 8, "shuts down or reboots the host"),
        (r"\b(?:curl|wget)\b", None, 3, "downloads from the network"),
        (r"\b(?:nc|ncat|netcat|socat|telnet)\b", None, 5, "opens network connections"),
    )
)


def scan_text(code: str) -> list[Finding]:
    """Findings for dangerous words in shell text that could not be parsed."""
    lines = code.splitlines()
    return [
        Finding(points, reason)
        for first, then, points, reason in _TEXT_RULES
        if any(_in_order(line, first, then) for line in lines)
    ]


def _in_order(line: str, first: re.Pattern[str], then: re.Pattern[str] | None) -> bool:
    match = first.search(line)
    if match is None:
        return False
    return then is None or then.search(line, match.end()) is not None


def prepare(code: str) -> str:
    """Rewrite syntax bashlex lacks into equivalent-enough shapes of the same length."""
    code = _blank_arithmetic(code)
    if "[[" in code:
        code = _TEST_CLOSE.sub(" ]", _TEST_OPEN.sub("[ ", code))
    if "=(" in code:
        code = _flatten_arrays(code)
    return code


def _blank_arithmetic(code: str) -> str:
    # $((…)) only computes numbers unless it hides a substitution; keep those for the parser.
    start = code.find("$((")
    while start != -1:
        end = _matching_paren(code, start + 1)
        if end is None:
            return code
        body = code[start + 3 : end - 1]
        if _ARITHMETIC_BODY.match(body) and "$(" not in body and "`" not in body:
            code = code[:start] + "0" + " " * (end - start) + code[end + 1 :]
        start = code.find("$((", start + 1)
    return code


def _flatten_arrays(code: str) -> str:
    # a=(x "y z") becomes the single word a=_x_"y_z"_ : same length, no command hidden.
    for match in reversed(list(_ARRAY_OPEN.finditer(code))):
        open_at = match.end() - 1
        close = _matching_paren(code, open_at)
        if close is None:
            continue
        body = code[open_at + 1 : close]
        if not _ARRAY_BODY.match(body) or "$(" in body:
            continue
        flat = re.sub(r"\s", "_", body)
        code = code[:open_at] + "_" + flat + "_" + code[close + 1 :]
    return code


def _matching_paren(code: str, open_at: int) -> int | None:
    depth = 0
    for index in range(open_at, len(code)):
        if code[index] == "(":
            depth += 1
        elif code[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return None
