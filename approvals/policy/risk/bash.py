"""Static analysis of Bash through a real parser (bashlex).

Every simple command is looked at after the parser has removed quoting, so
``ec""ho`` and ``r\\m`` read as ``echo`` and ``rm``; that the name was split in
the first place is itself a finding. Command names that come from variables
or substitutions (``$a``, ``$(printf '\\x72\\x6d')``) are resolved where the
script itself says what they hold, and scored as hidden commands either way.
Pipelines into a shell, redirects onto system paths and devices, reverse
shells and the usual destructive commands are scored by the rules in
``approvals.policy.risk.commands``.

bashlex does not implement some Bash syntax (arithmetic ``$((…))``, ``[[ … ]]``,
arrays, ``case``); the first three are rewritten into shapes it reads, keeping
every character position. Anything it still cannot parse is opaque: scored at
least medium and scanned for dangerous words.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from approvals.policy.risk.base import Finding, located
from approvals.policy.risk.bash_text import prepare, scan_text
from approvals.policy.risk.commands import (
    ASSIGNMENT,
    VARIABLE_FINDINGS,
    CommandRules,
    operands_of,
    short_flags,
)
from approvals.policy.risk.javascript import analyse_javascript
from approvals.policy.risk.python import analyse_python
from approvals.policy.risk.text import (
    is_block_device,
    is_harmless_device,
    is_secret_path,
    is_system_path,
    name_set,
    short,
)

MAX_DEPTH = 3  # bash -c "python -c '…'" and so on, but not forever

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "fish", "mksh", "busybox"})
INTERPRETERS = SHELLS | frozenset(
    {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "tclsh"}
)
DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "lynx", "links"})
DECODERS = frozenset(
    {"base64", "base32", "xxd", "openssl", "rev", "gunzip", "zcat", "uudecode", "tr"}
)
# Wrappers run the rest of their arguments as a command.
WRAPPERS = frozenset(
    {
        "env",
        "nice",
        "ionice",
        "nohup",
        "timeout",
        "stdbuf",
        "time",
        "command",
        "builtin",
        "exec",
        "xargs",
        "watch",
        "setsid",
        "unbuffer",
        "strace",
        "chrt",
        "taskset",
        "flock",
    }
)
ROOT_WRAPPERS = frozenset({"sudo", "doas", "pkexec", "su", "run0"})
# Commands that read or print and change nothing worth a finding.
HARMLESS = name_set(
    """
    : [ true false test echo printf ls cat tac pwd date cal whoami id groups uname hostname
    uptime df du free ps top w who grep egrep fgrep rg head tail wc sort uniq cut tr sleep
    seq expr basename dirname realpath readlink stat file which type cd pushd popd export
    read local declare typeset set shift return exit break continue unset jq yq diff cmp comm
    md5sum sha1sum sha256sum sha512sum cksum base32 gzip gunzip zcat tar zip unzip mkdir touch
    ln cp lsblk lscpu lsof netstat ss nproc getconf locale tput clear column fold fmt nl paste
    join split rev xxd od hexdump strings less more vmstat iostat mpstat sar dmesg journalctl
    env printenv tee sed awk gawk mawk find xargs wait trap let shopt getopts hash umask
    ulimit ping dig nslookup host traceroute tracepath whereis apropos man info bc dc factor
    numfmt tty stty logger mktemp sync nl iconv dos2unix unix2dos python python3 node
    """
)

_HEX_ESCAPE = re.compile(r"\\x[0-9a-fA-F]{1,2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}")
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
_VARIABLE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
_IFS = re.compile(r"\$\{?IFS\b")
_GLOB = re.compile(r"[*?]|\[.*\]")
_BRACE_LIST = re.compile(r"^\{[^{}]*,[^{}]*\}$")
_DEV_NET = re.compile(r"/dev/(?:tcp|udp)/")
# The option that passes code on the command line, per interpreter.
_INLINE_FLAGS: dict[str, tuple[str, ...]] = {
    **{shell: ("-c",) for shell in SHELLS},
    "python": ("-c",),
    "node": ("-e", "--eval", "-p", "--print"),
    "nodejs": ("-e", "--eval", "-p", "--print"),
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "php": ("-r",),
}


@functools.cache
def _bashlex() -> Any:
    """bashlex, imported on the first script to read (building its parser takes a
    quarter of a second, which every process that never reads Bash should not pay), and
    made to fail instead of hanging on ``${`` without a closing brace.

    bashlex 0.18 answers such a word (``'${'a%``) with position 0, so its
    expansion loop starts over forever while its buffer grows without bound:
    one crafted proposal would hang a worker and eat its memory.
    """
    import bashlex

    original = bashlex.subst._paramexpand
    if getattr(original, "guarded", False):
        return bashlex

    def guarded(parser: Any, string: str, start: int) -> tuple[Any, int]:
        node, end = original(parser, string, start)
        if end <= start:
            raise bashlex.errors.ParsingError("unclosed parameter expansion", string, start)
        return node, end

    guarded.guarded = True  # type: ignore[attr-defined]
    bashlex.subst._paramexpand = guarded
    return bashlex


def analyse_bash(code: str, depth: int = 0) -> list[Finding]:
    """Findings for a Bash script or command line (already NFKC-normalised)."""
    if not code.strip():
        return []
    prepared = prepare(code)
    try:
        trees = _bashlex().parse(prepared)
    except Exception as exc:  # bashlex raises many types for input it cannot read
        detail = short(str(exc) or type(exc).__name__, 50)
        return [
            Finding(5, f"Bash the parser cannot read ({detail}); treated as opaque")
        ] + scan_text(code)
    analyser = _Analyser(prepared, depth)
    analyser.run(trees)
    return analyser.findings


def _children(node: Any) -> Iterator[Any]:
    for name in ("parts", "list"):
        for child in getattr(node, name, None) or ():
            if hasattr(child, "kind"):
                yield child
    for name in ("command", "output", "heredoc"):
        child = getattr(node, name, None)
        if hasattr(child, "kind"):
            yield child


def walk(trees: list[Any]) -> Iterator[Any]:
    stack = list(reversed(trees))
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(_children(node))))


def decode_escapes(text: str) -> str:
    """What printf, echo -e or $'…' would print for backslash escapes."""
    try:
        return bytes(text, "latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return text


def _function_name(node: Any) -> str:
    # "f() {…}" and "function f {…}" both name the function in their first word node
    return next((p.word for p in node.parts if p.kind == "word"), "")


class _Analyser(CommandRules):
    """One pass over the parsed script, collecting findings."""

    def __init__(self, source: str, depth: int) -> None:
        self.source = source
        self.depth = depth
        self.findings: list[Finding] = []
        self.variables: dict[str, set[str]] = {}
        self.unknown: list[str] = []
        self.functions: set[str] = set()

    def add(self, points: int, reason: str) -> None:
        self.findings.append(Finding(points, reason))

    def text_of(self, node: Any) -> str:
        start, end = node.pos
        return self.source[start:end]

    def line_of(self, node: Any) -> int | None:
        pos = getattr(node, "pos", None)
        return self.source.count("\n", 0, pos[0]) + 1 if pos else None

    def run(self, trees: list[Any]) -> None:
        nodes = list(walk(trees))
        for node in nodes:
            since = len(self.findings)
            if node.kind == "assignment":
                self._assignment(node)
            elif node.kind == "function":
                self.functions.add(_function_name(node))  # its body is analysed where it stands
            located(self.findings, since, self.line_of(node))
        for node in nodes:
            handler = getattr(self, f"_visit_{node.kind}", None)
            if handler is not None:
                since = len(self.findings)
                handler(node)
                located(self.findings, since, self.line_of(node))
        if self.unknown:
            names = ", ".join(dict.fromkeys(self.unknown[:5]))
            self.add(2, f"runs commands outside the known-harmless list ({short(names, 60)})")

    # --- nodes ---------------------------------------------------------------

    def _assignment(self, node: Any) -> None:
        match = ASSIGNMENT.match(node.word)
        if not match:
            return
        name, value = match.groups()
        raw = self.text_of(node)[len(name) + 1 :]
        ansi = _ANSI_C.fullmatch(raw)
        if ansi:
            value = decode_escapes(ansi.group(1))
        self.variables.setdefault(name, set()).add(value)
        if name in VARIABLE_FINDINGS:
            self.add(*VARIABLE_FINDINGS[name])

    def _visit_command(self, node: Any) -> None:
        words = [p for p in node.parts if p.kind == "word"]
        if not words:
            return
        args = [w.word for w in words[1:]]
        if _BRACE_LIST.match(words[0].word):
            # {rm,-rf,/} expands to the words rm -rf /
            name, *expanded = words[0].word[1:-1].split(",")
            self.add(6, f"builds a command from a brace expansion ({short(words[0].word, 40)})")
            self._run(name, expanded + args, words[1:], wrapped=0)
            return
        for name in self._command_names(words[0]):
            self._run(name, args, words[1:], wrapped=0)
            base = name.rsplit("/", 1)[-1]
            if base in INTERPRETERS:
                for script in self._stdin_scripts(node):
                    self._inline(base, script)

    def _stdin_scripts(self, node: Any) -> list[str]:
        """Scripts handed to an interpreter as a here-document or here-string."""
        scripts = []
        for part in node.parts:
            if part.kind != "redirect":
                continue
            heredoc = getattr(part, "heredoc", None)
            if heredoc is not None:
                scripts.append(heredoc.value.rsplit("\n", 1)[0])
            elif part.type == "<<<" and hasattr(part.output, "word"):
                scripts.append(part.output.word)
        return scripts

    def _visit_pipeline(self, node: Any) -> None:
        commands = [p for p in node.parts if p.kind == "command"]
        for index, command in enumerate(commands[1:], start=1):
            words = [p.word for p in command.parts if p.kind == "word"]
            if not self._reads_script_from_stdin(words):
                continue
            before = {
                n.parts[0].word.rsplit("/", 1)[-1]
                for c in commands[:index]
                for n in walk([c])
                if n.kind == "command" and n.parts and n.parts[0].kind == "word"
            }
            if before & DOWNLOADERS:
                self.add(9, f"pipes a download into a shell ({short(self.text_of(node))})")
            elif before & DECODERS:
                self.add(8, f"pipes decoded text into a shell ({short(self.text_of(node))})")
            else:
                self.add(7, f"pipes text into a shell ({short(self.text_of(node))})")

    def _visit_redirect(self, node: Any) -> None:
        target = getattr(node, "output", None)
        if not hasattr(target, "word"):
            return
        path = target.word
        if node.type in ("<", "<<<"):
            if is_secret_path(path):
                self.add(7, f"reads a secret-bearing file ({short(path)})")
            return
        if node.type in ("<<", "<<-"):
            return
        self._write_target(path, f"redirects output to {short(path)}")

    def _visit_word(self, node: Any) -> None:
        text = self.text_of(node)
        if _DEV_NET.search(node.word) or _DEV_NET.search(text):
            self.add(9, "opens a raw network connection through /dev/tcp (reverse shell)")
        if is_secret_path(node.word):
            self.add(7, f"touches a secret-bearing path ({short(node.word)})")
        elif node.word in ("/etc/passwd", "/etc/group"):
            self.add(4, f"reads the account file {node.word}")
        if _ANSI_C.search(text) and _HEX_ESCAPE.search(text):
            self.add(6, f"hides text in $'…' escapes ({short(text, 40)})")
        elif _HEX_ESCAPE.search(text):
            self.add(5, f"uses escape sequences that can hide text ({short(text, 40)})")
        if _IFS.search(text):
            self.add(5, "uses $IFS in place of spaces (hides the command line)")

    def _visit_function(self, node: Any) -> None:
        name = _function_name(node)
        body = node.parts[-1]
        inner = list(walk([body]))
        calls_itself = any(
            n.kind == "command" and n.parts and getattr(n.parts[0], "word", None) == name
            for n in inner
        )
        if calls_itself and any(n.kind == "pipeline" for n in inner):
            self.add(
                9,
                f"defines a self-replicating function (fork bomb: {short(self.text_of(node), 30)})",
            )
        elif calls_itself:
            self.add(3, f"defines a recursive function ({name})")

    # --- command names -------------------------------------------------------

    def _command_names(self, word: Any) -> list[str]:
        """What the first word of a command may run, noting any effort to hide it."""
        text = self.text_of(word)
        substitutions = [
            p
            for p in getattr(word, "parts", None) or ()
            if p.kind in ("commandsubstitution", "processsubstitution")
        ]
        if substitutions:
            self.add(6, f"runs a command whose name is computed ({short(text, 40)})")
            return [n for s in substitutions for n in self._printed_by(s.command)] or []
        if "$" in word.word:
            return self._variable_name(word.word, text)
        if _GLOB.search(word.word):
            self.add(6, f"uses wildcards in a command name ({short(text, 40)})")
            return []
        if text != word.word and not self._quoted_whole(text, word.word):
            self.add(
                6, f"splits a command name with quotes or escapes ({short(text, 30)} → {word.word})"
            )
        return [word.word]

    def _quoted_whole(self, text: str, word: str) -> bool:
        return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[1:-1] == word

    def _variable_name(self, word: str, text: str) -> list[str]:
        self.add(6, f"runs a command named by a variable ({short(text, 40)})")
        match = _VARIABLE.match(word)
        return sorted(self.variables.get(match.group(1), ())) if match else []

    def _printed_by(self, command: Any) -> list[str]:
        """The output of ``printf '\\x72\\x6d'`` or ``echo rm``, when it is a literal."""
        if command.kind != "command":
            return []
        words = [p.word for p in command.parts if p.kind == "word"]
        if not words or words[0] not in ("printf", "echo"):
            return []
        operands = [w for w in words[1:] if not w.startswith("-")]
        if not operands:
            return []
        printed = decode_escapes(operands[0]).strip()
        self.add(7, f"spells a command with {words[0]} at run time ({short(printed, 20)})")
        return [printed.split()[0]] if printed.split() else []

    # --- commands --------------------------------------------------------------

    def _run(self, name: str, args: list[str], arg_words: list[Any], wrapped: int) -> None:
        base = name.rsplit("/", 1)[-1]
        if wrapped > 4:
            return
        if base in ROOT_WRAPPERS:
            self.add(6, f"runs as root ({base})")
            self._wrapper(base, args, arg_words, wrapped)
            return
        if base in WRAPPERS and args:
            if base in ("nohup", "setsid"):
                self.add(3, f"keeps running after the request ends ({base})")
            self._wrapper(base, args, arg_words, wrapped)
            return
        self._download_as_script(base, arg_words)
        rule = getattr(self, f"_rule_{base.replace('-', '_').replace('.', '_')}", None)
        if base.startswith("mkfs") or base in ("mke2fs", "mkswap"):
            self.add(10, f"formats a filesystem ({base})")
        elif rule is not None:
            rule(base, args)
        elif base in INTERPRETERS:
            self._interpreter(base, args)
        elif base not in HARMLESS and base not in self.functions and base:
            self.unknown.append(base)

    def _wrapper(self, base: str, args: list[str], arg_words: list[Any], wrapped: int) -> None:
        index = 0
        takes_value = {"-u", "-g", "-c", "-s", "-n", "-k", "-I", "-d", "-P", "-L", "-E", "-C", "-p"}
        while index < len(args) and (args[index].startswith("-") or ASSIGNMENT.match(args[index])):
            if base == "su" and args[index] == "-c" and index + 1 < len(args):
                self._nested(args[index + 1])
            index += 2 if args[index] in takes_value and base != "env" else 1
        if base == "timeout" and index < len(args):
            index += 1  # the duration
        if index < len(args):
            self._run(args[index], args[index + 1 :], arg_words[index + 1 :], wrapped + 1)

    def _download_as_script(self, base: str, arg_words: list[Any]) -> None:
        if base not in SHELLS and base not in ("source", ".", "eval"):
            return
        for word in arg_words:
            inner = {
                n.parts[0].word
                for n in walk([word])
                if n.kind == "command" and n.parts and n.parts[0].kind == "word"
            }
            if inner & DOWNLOADERS:
                self.add(9, f"runs a download as a script ({base} {short(self.text_of(word), 40)})")

    def _nested(self, code: str) -> None:
        if self.depth < MAX_DEPTH:
            self.findings.extend(analyse_bash(code, self.depth + 1))
        else:
            self.add(6, "nests shells too deeply to analyse")

    def _reads_script_from_stdin(self, words: list[str]) -> bool:
        while words and words[0].rsplit("/", 1)[-1] in ROOT_WRAPPERS | {"env", "exec", "command"}:
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        if not words or words[0].rsplit("/", 1)[-1] not in INTERPRETERS:
            return False
        rest = [w for w in words[1:] if w not in ("-", "-s", "-i", "-x", "-e", "-u", "--")]
        return not rest or all(w.startswith("-") for w in rest)

    def _write_target(self, path: str, how: str) -> None:
        if is_harmless_device(path) or _DEV_NET.search(path):
            return
        if is_block_device(path):
            self.add(10, f"writes straight to the device {short(path)} ({how})")
        elif is_secret_path(path):
            self.add(9, f"writes to a secret-bearing path ({how})")
        elif is_system_path(path):
            self.add(8, f"writes under a system directory ({how})")
        else:
            self.add(2, f"writes to files ({how})")

    def _interpreter(self, base: str, args: list[str]) -> None:
        if base in SHELLS and "i" in short_flags(args):
            self.add(7, f"starts an interactive shell ({base} -i)")
        inline_flags = _INLINE_FLAGS.get(base.rstrip("0123456789."), ("-c", "-e"))
        inline = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in inline_flags), None)
        if inline is None:
            if operands_of(args):
                self.add(
                    3, f"runs another program's script ({base} {short(operands_of(args)[0], 30)})"
                )
            return
        self._inline(base, inline)

    def _inline(self, base: str, code: str) -> None:
        if self.depth >= MAX_DEPTH:
            self.add(6, "nests interpreters too deeply to analyse")
            return
        if base in SHELLS:
            self._nested(code)
        elif base.startswith("python"):
            found = analyse_python(code, shell=lambda c: analyse_bash(c, self.depth + 1))
            self.findings.extend(Finding(f.points, f"its inline Python {f.reason}") for f in found)
        elif base in ("node", "nodejs"):
            found = analyse_javascript(code)
            self.findings.extend(
                Finding(f.points, f"its inline JavaScript {f.reason}") for f in found
            )
        else:
            self.add(5, f"runs inline {base} code the analyser does not read")
