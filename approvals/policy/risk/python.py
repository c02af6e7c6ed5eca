"""Static analysis of Python through ``ast``.

What it looks for: imports of process, network, file, native-code and
import-machinery modules; ``eval``/``exec``/``compile``; names assembled at run
time (``__import__('o'+'s')``, ``getattr(x, '__imp'+'ort__')``); walks through
``__subclasses__``/``__globals__``/``__builtins__``; file writes and deletes;
shell commands (which are analysed as Bash); modules reached through other
modules (``shutil.os``). Code that does not parse is scored as opaque and
then scanned word by word, so a syntax error never hides a dangerous name.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable

from approvals.policy.risk.base import Finding, located
from approvals.policy.risk.python_names import (
    ATTRIBUTES,
    BUILTINS,
    DECODERS,
    ENCODED_BLOB,
    EXEC_ATTRIBUTE,
    GETATTR_FAMILY,
    IDENTIFIER,
    MODE,
    MODULES,
    PROCESS_CALLS,
    QUALIFIED,
    REQUESTS_CALL,
    SAFE_MODULES,
    SHELL_CALLS,
    TEXT_IMPORT,
    WRITE_MODE,
)
from approvals.policy.risk.text import mentioned_path_findings, short

ShellAnalyser = Callable[[str], list[Finding]]


def analyse_python(code: str, shell: ShellAnalyser | None = None) -> list[Finding]:
    """Findings for Python source (already NFKC-normalised by the caller)."""
    try:
        tree = _parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return _unparseable(code, exc)
    analyser = _Analyser(shell)
    try:
        analyser.run(tree)
    except RecursionError:
        analyser.add(6, "Python nested too deeply to analyse fully")
    return analyser.findings


def _parse(code: str) -> ast.Module:
    try:
        return _quiet_parse(code)
    except SyntaxError as first:
        # A dangling line continuation is completed by whatever line comes next;
        # read it as completed by a harmless one, so more code never reads as less.
        try:
            return _quiet_parse(code + "\n\npass")
        except SyntaxError:
            raise first from None


def _quiet_parse(code: str) -> ast.Module:
    # Odd proposals trigger SyntaxWarnings (bad escapes, "1if"); they are not ours to log.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(code)


def _unparseable(code: str, exc: BaseException) -> list[Finding]:
    detail = getattr(exc, "msg", None) or type(exc).__name__
    findings = [
        Finding(5, f"Python that does not parse ({short(str(detail), 50)}); treated as opaque")
    ]
    return findings + scan_words(code)


def scan_words(code: str) -> list[Finding]:
    """What the dangerous names in unparseable text would be worth if it ran."""
    findings = [_module_finding(m.group(1)) for m in TEXT_IMPORT.finditer(code)]
    for word in set(IDENTIFIER.findall(code)):
        if word in MODULES:
            findings.append(_module_finding(word))
        if word in BUILTINS:
            findings.append(Finding(*BUILTINS[word]))
        if word in ATTRIBUTES or EXEC_ATTRIBUTE.match(word):
            findings.append(_attribute_finding(word, word))
        if word in GETATTR_FAMILY:
            findings.append(Finding(5, f"looks attributes up by name ({word})"))
        if word == "open":
            findings.append(Finding(5, "opens files (open)"))
    return [f for f in findings if f.points > 0]


def _module_finding(name: str) -> Finding:
    root = name.split(".")[0]
    if name in MODULES:
        points, what = MODULES[name]
    elif root in MODULES:
        points, what = MODULES[root]
    elif root in SAFE_MODULES:
        return Finding(0, f"imports {root}")
    else:
        return Finding(2, "imports modules outside the known-harmless list")
    return Finding(points, f"imports {root} ({what})")


def _attribute_finding(attr: str, spelled: str) -> Finding:
    points, what = ATTRIBUTES.get(attr, (7, "replaces the process with another program"))
    return Finding(points, f"uses {short(spelled, 50)} ({what})")


def fold_string(node: ast.AST) -> tuple[str, bool] | None:
    """The value of a string expression built from literals, and whether it was assembled.

    Handles ``'a' + 'b'``, f-strings of literals, ``''.join([...])``, ``chr(115)``,
    slicing such as ``'so'[::-1]`` and ``.decode()`` of bytes literals. Returns
    None when the value depends on anything computed at run time.
    """
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return node.value, False
        return None
    folded = _fold_assembled(node)
    return (folded, True) if folded is not None else None


def _fold_assembled(node: ast.AST) -> str | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = fold_string(node.left), fold_string(node.right)
        return left[0] + right[0] if left and right else None
    if isinstance(node, ast.JoinedStr):
        parts = [fold_string(v) for v in node.values]
        return "".join(p[0] for p in parts) if all(parts) else None  # type: ignore[index]
    if isinstance(node, ast.FormattedValue):
        inner = fold_string(node.value)
        return inner[0] if inner and node.format_spec is None else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        return _fold_slice(node)
    if isinstance(node, ast.Call):
        return _fold_call(node)
    return None


def _fold_slice(node: ast.Subscript) -> str | None:
    base = fold_string(node.value)
    bounds = [node.slice.lower, node.slice.upper, node.slice.step]  # type: ignore[attr-defined]
    values = [_int_literal(b) if b is not None else None for b in bounds]
    if base is None or any(
        b is not None and v is None for b, v in zip(bounds, values, strict=True)
    ):
        return None
    if values[2] == 0:
        return None
    return base[0][slice(*values)]


def _fold_call(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "chr" and len(node.args) == 1:
        code = _int_literal(node.args[0])
        return chr(code) if code is not None and 0 <= code < 0x110000 else None
    if not isinstance(func, ast.Attribute):
        return None
    if (
        func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.List | ast.Tuple)
    ):
        separator = fold_string(func.value)
        parts = [fold_string(e) for e in node.args[0].elts]
        if separator is None or not all(parts):
            return None
        return separator[0].join(p[0] for p in parts)  # type: ignore[index]
    if (
        func.attr == "decode"
        and isinstance(func.value, ast.Constant)
        and isinstance(func.value.value, bytes)
    ):
        return func.value.value.decode("utf-8", "replace")
    return None


def _int_literal(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return -inner if inner is not None else None
    return None


def _dotted(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


class _Analyser:
    """One pass over a module's AST, collecting findings."""

    def __init__(self, shell: ShellAnalyser | None) -> None:
        self.findings: list[Finding] = []
        # local name -> every dotted name it may stand for (later imports add, never replace)
        self.aliases: dict[str, set[str]] = {}
        self.shell = shell
        self.called: set[int] = set()  # ids of nodes in call position

    def add(self, points: int, reason: str) -> None:
        self.findings.append(Finding(points, reason))

    def run(self, tree: ast.AST) -> None:
        nodes = list(ast.walk(tree))
        self.called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                since = len(self.findings)
                self._import(node)
                located(self.findings, since, node.lineno)
        for node in nodes:
            since = len(self.findings)
            self._visit(node)
            located(self.findings, since, getattr(node, "lineno", None))

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.findings.append(_module_finding(alias.name))
                local = alias.asname or alias.name.split(".")[0]
                self.aliases.setdefault(local, set()).add(alias.name if alias.asname else local)
            return
        module = node.module or ""
        if node.level:
            self.add(2, "imports modules outside the known-harmless list")
            return
        self.findings.append(_module_finding(module))
        for alias in node.names:
            if alias.name == "*":
                self.aliases.setdefault("*", set()).add(module)
                continue
            self.aliases.setdefault(alias.asname or alias.name, set()).add(f"{module}.{alias.name}")
            self._check_qualified(f"{module}.{alias.name}")
            if module in ("builtins", "__builtin__") and alias.name in BUILTINS:
                self.findings.append(Finding(*BUILTINS[alias.name]))

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, ast.Name):
            self._name(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            self._string(node.value)
        elif isinstance(node, ast.Subscript):
            self._subscript(node)

    def _resolve(self, parts: list[str]) -> list[str]:
        """Dotted names this chain may stand for, following import aliases."""
        targets = self.aliases.get(parts[0])
        if targets:
            return [".".join([t, *parts[1:]]) for t in sorted(targets)]
        for module in sorted(self.aliases.get("*", ())):
            if f"{module}.{parts[0]}" in QUALIFIED or parts[0] in ATTRIBUTES:
                return [".".join([module, *parts])]
        return [".".join(parts)]

    def _check_qualified(self, name: str) -> None:
        hop = self._hidden_hop(name)
        if hop:
            name = hop
        if name in QUALIFIED:
            points, what = QUALIFIED[name]
            self.add(points, f"uses {name} ({what})")
        elif name.startswith("subprocess.") and name.split(".")[1] in {"run", "call"}:
            self.add(6, f"uses {name} (runs a process)")
        elif REQUESTS_CALL.match(name):
            self.add(4, f"uses {name} (network request)")

    def _hidden_hop(self, name: str) -> str | None:
        """``shutil.os.system`` -> ``os.system``, noting that os was reached through shutil."""
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if _is_hop(parts, i) and parts[0] in self._module_roots():
                self.add(
                    6, f"reaches {parts[i]} through {'.'.join(parts[: i + 1])} (a hidden import)"
                )
                self.findings.append(_module_finding(parts[i]))
                return ".".join(parts[i:])
        return None

    def _module_roots(self) -> set[str]:
        return {t.split(".")[0] for targets in self.aliases.values() for t in targets}

    def _attribute(self, node: ast.Attribute) -> None:
        parts = _dotted(node)
        spelled = ".".join(parts) if parts else f".{node.attr}"
        if node.attr in ATTRIBUTES or EXEC_ATTRIBUTE.match(node.attr):
            self.findings.append(_attribute_finding(node.attr, spelled))
        if parts:
            for name in self._resolve(parts):
                self._check_qualified(name)

    def _name(self, node: ast.Name) -> None:
        if node.id == "__import__" and id(node) not in self.called:
            self.add(7, "references __import__ (the import machinery)")
        if node.id in BUILTINS and node.id not in {"globals", "vars", "locals", "breakpoint"}:
            self.findings.append(Finding(*BUILTINS[node.id]))
        if "*" in self.aliases and (node.id in ATTRIBUTES or EXEC_ATTRIBUTE.match(node.id)):
            for module in sorted(self.aliases["*"]):
                self.findings.append(_attribute_finding(node.id, f"{module}.{node.id}"))
        for target in self.aliases.get(node.id, ()):
            if "." in target:
                self._check_qualified(target)
                last = target.rsplit(".", 1)[1]
                if last in ATTRIBUTES or EXEC_ATTRIBUTE.match(last):
                    self.findings.append(_attribute_finding(last, target))

    def _string(self, value: str) -> None:
        stripped = value.strip()
        if stripped in ATTRIBUTES and stripped.startswith("__"):
            self.findings.append(_attribute_finding(stripped, repr(stripped)))
        if len(value) < 4096:
            self.findings.extend(mentioned_path_findings(value))
        if len(value) >= 200 and ENCODED_BLOB.match(value):
            self.add(3, "carries a long encoded blob")

    def _subscript(self, node: ast.Subscript) -> None:
        parts = _dotted(node.value)
        key = fold_string(node.slice)
        if parts and key and any(n == "sys.modules" for n in self._resolve(parts)):
            self.findings.append(_module_finding(key[0]))

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in BUILTINS:
                self.findings.append(Finding(*BUILTINS[func.id]))
            self._builtin_call(func.id, node)
        names = self._call_names(func)
        for name in names:
            self._library_call(name, node)
        if isinstance(func, ast.Attribute) and func.attr == "open" and "io.open" not in names:
            self._open(node, path_index=None)

    def _call_names(self, func: ast.AST) -> list[str]:
        parts = _dotted(func)
        if not parts:
            return []
        names = self._resolve(parts)
        return [self._strip_hop(n) for n in names]

    def _strip_hop(self, name: str) -> str:
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if _is_hop(parts, i):
                return ".".join(parts[i:])
        return name

    def _builtin_call(self, name: str, node: ast.Call) -> None:
        if name == "__import__":
            self._dynamic_import(node, "__import__")
        elif name in ("eval", "exec", "compile"):
            self._evaluated(node)
        elif name in GETATTR_FAMILY:
            self._getattr(name, node)
        elif name == "open":
            self._open(node, path_index=0)

    def _library_call(self, name: str, node: ast.Call) -> None:
        if name in ("importlib.import_module", "importlib.__import__", "builtins.__import__"):
            self._dynamic_import(node, name)
        elif name in ("io.open", "codecs.open", "os.fdopen"):
            self._open(node, path_index=0)
        elif name in SHELL_CALLS or name in PROCESS_CALLS:
            self._process(name, node)

    def _dynamic_import(self, node: ast.Call, how: str) -> None:
        if not node.args:
            return
        folded = fold_string(node.args[0])
        if folded is None:
            self.add(7, f"imports a module by a name computed at run time ({how})")
            return
        module, assembled = folded
        self.findings.append(_module_finding(module))
        if assembled:
            self.add(7, f"assembles the module name {short(module, 40)!r} at run time ({how})")
        else:
            self.add(4, f"imports {short(module, 40)} through {how} (hides the import)")

    def _getattr(self, name: str, node: ast.Call) -> None:
        if len(node.args) < 2:
            return
        folded = fold_string(node.args[1])
        if folded is None:
            self.add(5, f"looks an attribute up by a computed name ({name})")
            return
        attribute, assembled = folded
        if attribute in ATTRIBUTES or EXEC_ATTRIBUTE.match(attribute):
            self.findings.append(_attribute_finding(attribute, f"{name}(…, {attribute!r})"))
        if assembled:
            points = 7 if attribute.startswith("__") or attribute in ATTRIBUTES else 5
            self.add(
                points,
                f"assembles the attribute name {short(attribute, 40)!r} at run time ({name})",
            )
        target = _dotted(node.args[0])
        if target and target[0] in ("builtins", "__builtins__"):
            self.add(6, f"looks up builtins by name ({name})")

    def _evaluated(self, node: ast.Call) -> None:
        if not node.args:
            return
        argument = node.args[0]
        if fold_string(argument) is None and any(
            isinstance(n, ast.Call) and _called_name(n) in DECODERS for n in ast.walk(argument)
        ):
            self.add(8, "runs code it decodes at run time (hidden payload)")
        elif fold_string(argument) is None and not isinstance(argument, ast.Constant):
            self.add(7, "runs code computed at run time")

    def _process(self, name: str, node: ast.Call) -> None:
        uses_shell = name in SHELL_CALLS or any(
            k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
            for k in node.keywords
        )
        if uses_shell and name not in SHELL_CALLS:
            self.add(7, f"runs a command through a shell ({name} with shell=True)")
        command = _command_text(node.args[0]) if node.args else None
        if command and self.shell is not None:
            for finding in self.shell(command):
                if finding.points:
                    self.add(finding.points, f"its shell command {finding.reason}")

    def _open(self, node: ast.Call, path_index: int | None) -> None:
        mode_node = _mode_argument(node, path_index)
        mode = fold_string(mode_node) if mode_node is not None else ("r", False)
        if mode is None:
            self.add(5, "opens a file with a mode computed at run time")
        elif WRITE_MODE.search(mode[0]):
            self.add(5, f"writes files (open mode {mode[0]!r})")
        elif path_index is None:
            self.add(3, "opens a file or resource (.open)")
        else:
            path = fold_string(node.args[path_index]) if len(node.args) > path_index else None
            if path is not None and _is_local(path[0]):
                self.add(3, "reads a file in the working directory")
            else:
                self.add(4, "reads files outside the working directory")


def _is_hop(parts: list[str], i: int) -> bool:
    """Is ``parts[i]`` a risky module reached as an attribute of something else?"""
    # socket.socket is a class named like its module, not a second module
    return parts[i] in MODULES and MODULES[parts[i]][0] >= 4 and parts[i] != parts[i - 1]


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _mode_argument(node: ast.Call, path_index: int | None) -> ast.AST | None:
    for keyword in node.keywords:
        if keyword.arg == "mode":
            return keyword.value
    index = 1 if path_index is not None else 0
    if len(node.args) > index:
        candidate = node.args[index]
        if path_index is not None:
            return candidate
        folded = fold_string(candidate)
        if folded is not None and MODE.match(folded[0]):
            return candidate
    return None


def _is_local(path: str) -> bool:
    return not path.startswith(("/", "~", "\\")) and ".." not in path and ":" not in path


def _command_text(node: ast.AST) -> str | None:
    folded = fold_string(node)
    if folded is not None:
        return folded[0]
    if isinstance(node, ast.List | ast.Tuple):
        parts = [fold_string(e) for e in node.elts]
        if parts and all(parts):
            return " ".join(_quote_word(p[0]) for p in parts)  # type: ignore[index]
    return None


def _quote_word(word: str) -> str:
    return word if re.fullmatch(r"[\w@%+=:,./-]+", word) else "'" + word.replace("'", "'\\''") + "'"
