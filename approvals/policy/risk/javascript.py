"""Static analysis of JavaScript by patterns.

There is no JavaScript parser among the dependencies, so this reads the text:
modules required or imported (``child_process``, ``fs``, ``net``, ``http``…),
``require`` and ``import()`` of names assembled at run time, ``eval``,
``Function``, the ``constructor`` trick, ``process.env`` and native bindings,
file writes and deletes, and the encodings used to hide names. A cheap lexer
checks that brackets, strings and comments are balanced; text that fails is
scored as opaque, never as harmless.
"""

from __future__ import annotations

import re

from approvals.policy.risk.base import Finding
from approvals.policy.risk.text import mentioned_path_findings, short

# module -> (points, what it gives the code)
MODULES: dict[str, tuple[int, str]] = {
    "child_process": (7, "runs processes"),
    "vm": (6, "runs code in new contexts"),
    "fs": (4, "file access"),
    "fs/promises": (4, "file access"),
    "net": (5, "raw network connections"),
    "dgram": (5, "raw network connections"),
    "tls": (4, "network connections"),
    "http": (4, "network access"),
    "https": (4, "network access"),
    "http2": (4, "network access"),
    "dns": (2, "name lookups"),
    "os": (2, "host information"),
    "process": (3, "the process object"),
    "worker_threads": (3, "starts threads"),
    "cluster": (3, "starts processes"),
    "module": (5, "the module loader"),
    "v8": (5, "engine internals"),
    "inspector": (5, "the debugger"),
    "repl": (4, "an interactive interpreter"),
    "wasi": (4, "system interface for WebAssembly"),
    "axios": (4, "network access"),
    "node-fetch": (4, "network access"),
    "request": (4, "network access"),
    "ws": (4, "network access"),
    "shelljs": (7, "runs shell commands"),
    "execa": (7, "runs processes"),
}
SAFE_MODULES = frozenset(
    {
        "path",
        "util",
        "assert",
        "events",
        "crypto",
        "url",
        "querystring",
        "string_decoder",
        "buffer",
        "stream",
        "zlib",
        "readline",
        "timers",
        "perf_hooks",
        "lodash",
        "moment",
    }
)

_QUOTE = "['\"`]"
_LITERAL = re.compile(r"""^\s*(['"`])([^'"`\\$]*)\1\s*$""")
_STRING_PIECE = re.compile(r"""^\s*(['"])((?:[^'"\\]|\\.)*)\1\s*$""")
MAX_COMPUTED_LOADS = 50
_LITERAL_LOAD = re.compile(
    r"""(?:\brequire|(?<![\w.$])import)\s*\(\s*(['"`])([^'"`\\$\n]{1,200})\1\s*\)"""
)
_REQUIRE = re.compile(r"\brequire\s*\(")
_DYNAMIC_IMPORT = re.compile(r"(?<![\w.$])import\s*\(")
# import x from 'm' / export … from 'm' / import 'm': the from-clause names the module.
_STATIC_IMPORT = re.compile(
    r"""\bfrom\s*(['"])([^'"\n]{1,200})\1|\bimport\s*(['"])([^'"\n]{1,200})\3"""
)
_STRING_LITERAL = re.compile(r"""'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)\"""")

PATTERNS: tuple[tuple[re.Pattern[str], int, str], ...] = tuple(
    (re.compile(pattern), points, reason)
    for pattern, points, reason in (
        (r"(?<![\w$.])eval\s*\(", 6, "evaluates a string as code (eval)"),
        (r"(?<![\w$])(?:new\s+)?Function\s*\(", 6, "builds a function from a string (Function)"),
        (
            r"\.constructor\s*\(|\[\s*" + _QUOTE + r"constructor" + _QUOTE + r"\s*\]",
            6,
            "reaches the Function constructor (constructor trick)",
        ),
        (
            r"constructor\s*\.\s*constructor|\[\s*"
            + _QUOTE
            + r"constructor"
            + _QUOTE
            + r"\s*\]\s*\[\s*"
            + _QUOTE
            + r"constructor",
            8,
            "climbs to the Function constructor (sandbox escape)",
        ),
        (r"\b(?:execSync|execFileSync|spawnSync|execFile|spawn|fork)\s*\(", 6, "runs a process"),
        (r"\bprocess\s*\.\s*env\b", 4, "reads environment variables (process.env)"),
        (
            r"\bprocess\s*\.\s*(?:binding|_linkedBinding|dlopen)\b",
            8,
            "reaches native bindings (process.binding)",
        ),
        (
            r"\bprocess\s*\.\s*mainModule\b|\bmodule\s*\.\s*constructor\b|\bmodule\s*\.\s*require\b",
            6,
            "reaches the module loader another way (require bypass)",
        ),
        (r"\bprocess\s*\.\s*kill\s*\(", 5, "sends signals to processes"),
        (r"\bprocess\s*\.\s*(?:setuid|setgid|chdir|umask)\s*\(", 4, "changes the process"),
        (r"\b(?:globalThis|global|window|self)\s*\[", 5, "looks up a global by a computed name"),
        (
            r"\bfetch\s*\(|\bXMLHttpRequest\b|\bWebSocket\b|\bEventSource\b",
            4,
            "makes network requests",
        ),
        (
            r"\b(?:http|https|net|tls|dgram)\s*\.\s*(?:get|request|connect|createConnection|createServer|createSocket)\s*\(",
            5,
            "opens network connections",
        ),
        (
            r"\b(?:writeFile|writeFileSync|appendFile|appendFileSync|createWriteStream|copyFile|copyFileSync|"
            r"rename|renameSync|truncate|truncateSync|symlink|symlinkSync)\s*\(",
            5,
            "writes files",
        ),
        (r"\b(?:rm|rmSync|rmdir|rmdirSync|unlink|unlinkSync)\s*\(", 6, "deletes files"),
        (r"\b(?:chmod|chmodSync|chown|chownSync)\s*\(", 5, "changes file permissions"),
        (
            r"\b(?:readFile|readFileSync|createReadStream|readdir|readdirSync|opendir)\s*\(",
            4,
            "reads files",
        ),
        (
            r"\bset(?:Timeout|Interval)\s*\(\s*['\"`]",
            5,
            "runs a string as code (setTimeout with a string)",
        ),
        (
            r"\bString\s*\.\s*fromCharCode\b|\bString\s*\.\s*fromCodePoint\b",
            4,
            "builds strings from character codes (can hide names)",
        ),
        (
            r"\batob\s*\(|\bBuffer\s*\.\s*from\s*\([^)]*['\"](?:base64|hex)['\"]",
            4,
            "decodes base64 or hex (can hide a payload)",
        ),
        (
            r"\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\u\{[0-9a-fA-F]+\}",
            4,
            "uses escape sequences that can hide names",
        ),
        (r"\b__proto__\b|\bObject\s*\.\s*setPrototypeOf\b", 3, "rewires prototypes"),
        (r"\bWebAssembly\b", 4, "runs WebAssembly"),
        (r"\bDeno\s*\.\s*(?:run|Command)\b|\bBun\s*\.\s*spawn\b", 7, "runs processes"),
    )
)


def analyse_javascript(code: str) -> list[Finding]:
    """Findings for JavaScript source (already NFKC-normalised by the caller)."""
    findings = [
        Finding(points, reason, line=code.count("\n", 0, match.start()) + 1)
        for pattern, points, reason in PATTERNS
        if (match := pattern.search(code))
    ]
    findings += _module_findings(code)
    for match in _STRING_LITERAL.finditer(code):
        text = match.group(1) if match.group(1) is not None else match.group(2)
        if len(text) < 4096:
            findings += mentioned_path_findings(text)
    problem = unbalanced(code)
    if problem:
        findings.append(
            Finding(5, f"JavaScript that does not parse ({problem}); treated as opaque")
        )
    return findings


def _module_findings(code: str) -> list[Finding]:
    names = {m.group(2) or m.group(4) for m in _STATIC_IMPORT.finditer(code)}
    names |= {m.group(2) for m in _LITERAL_LOAD.finditer(code)}
    findings = [_module_finding(name) for name in sorted(names)]
    computed = 0
    for pattern, how in ((_REQUIRE, "require"), (_DYNAMIC_IMPORT, "import()")):
        for match in pattern.finditer(code):
            if _LITERAL_LOAD.match(code, match.start()):
                continue
            computed += 1
            if computed > MAX_COMPUTED_LOADS:
                # Reading every one would cost quadratic time; the rest count as unreadable.
                findings.append(
                    Finding(7, f"loads a module whose name the analyser cannot read ({how})")
                )
                break
            findings += _loaded(_call_argument(code, match.end()), how)
    return findings


def _loaded(argument: str | None, how: str) -> list[Finding]:
    if argument is None:
        return [Finding(7, f"loads a module whose name the analyser cannot read ({how})")]
    literal = _LITERAL.match(argument)
    if literal:
        return [_module_finding(literal.group(2))]
    folded = fold_concatenation(argument)
    if folded is None:
        return [Finding(7, f"loads a module by a name computed at run time ({how})")]
    return [
        _module_finding(folded),
        Finding(8, f"assembles the module name {short(folded, 40)!r} at run time ({how})"),
    ]


def _module_finding(name: str) -> Finding:
    bare = name.removeprefix("node:")
    if bare in MODULES:
        points, what = MODULES[bare]
        return Finding(points, f"loads {bare} ({what})")
    root = bare.split("/")[0]
    if root in MODULES:
        points, what = MODULES[root]
        return Finding(points, f"loads {root} ({what})")
    if bare in SAFE_MODULES:
        return Finding(0, f"loads {bare}")
    return Finding(2, "loads modules outside the known-harmless list")


def _call_argument(code: str, start: int) -> str | None:
    """Text between the opening parenthesis at ``start - 1`` and its match."""
    depth = 1
    quote = ""
    index = start
    while index < len(code) and index - start < 500:
        char = code[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return code[start:index]
        index += 1
    return None


def fold_concatenation(expression: str) -> str | None:
    """``'child_' + "process"`` -> ``child_process``; None unless every piece is a literal."""
    pieces = _split_plus(expression)
    values = []
    for piece in pieces:
        match = _STRING_PIECE.match(piece)
        if not match:
            return None
        values.append(_unescape(match.group(2)))
    return "".join(values)


def _split_plus(expression: str) -> list[str]:
    pieces, current, quote = [], [], ""
    escaped = False
    for char in expression:
        if quote:
            current.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == "+":
            pieces.append("".join(current))
            current = []
        else:
            current.append(char)
    pieces.append("".join(current))
    return pieces


def _unescape(text: str) -> str:
    try:
        return bytes(text, "latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return text


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_REGEX_PRECEDERS = set("(,=:[!&|?{};+-*%<>~^") | {""}


def unbalanced(code: str) -> str | None:
    """Why the text cannot be JavaScript (unclosed string, comment or bracket), or None."""
    stack: list[str] = []
    index, length = 0, len(code)
    previous = ""  # last significant character, to tell a regex from a division
    while index < length:
        char = code[index]
        pair = code[index : index + 2]
        if pair == "//":
            newline = code.find("\n", index)
            index = length if newline == -1 else newline
            continue
        if pair == "/*":
            end = code.find("*/", index + 2)
            if end == -1:
                return "unclosed comment"
            index = end + 2
            continue
        if char in "'\"`" or (char == "/" and previous in _REGEX_PRECEDERS):
            end = _skip_literal(code, index, char)
            if end is None:
                return "unclosed string or regular expression"
            index, previous = end, "a"
            continue
        if char in _OPENERS:
            stack.append(_OPENERS[char])
        elif char in ")]}" and (not stack or stack.pop() != char):
            return f"unexpected {char!r}"
        if not char.isspace():
            previous = char if not (char.isalnum() or char in "_$") else "a"
        index += 1
    return f"unclosed {stack[-1]!r}" if stack else None


def _skip_literal(code: str, start: int, quote: str) -> int | None:
    """Index just past the string, template or regex literal opening at ``start``."""
    index = start + 1
    in_class = False
    while index < len(code):
        char = code[index]
        if char == "\\":
            index += 2
            continue
        if quote == "/":
            if char == "\n":
                return None
            if char == "[":
                in_class = True
            elif char == "]":
                in_class = False
            elif char == "/" and not in_class:
                return index + 1
        elif char == quote:
            return index + 1
        elif char == "\n" and quote != "`":
            return None
        elif quote == "`" and code.startswith("${", index):
            end = _template_expression_end(code, index + 2)
            if end is None:
                return None
            index = end
            continue
        index += 1
    return None


def _template_expression_end(code: str, start: int) -> int | None:
    depth = 1
    index = start
    while index < len(code):
        char = code[index]
        if char in "'\"`":
            end = _skip_literal(code, index, char)
            if end is None:
                return None
            index = end
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None
