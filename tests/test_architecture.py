"""The architecture as the folders show it: no import circles, a docstring per package,
modules of a readable size, tasks found by the names they are enqueued by, and a map
(docs/architecture.md) whose every module name is real.

The layers themselves are import-linter contracts in pyproject.toml (``lint-imports``,
run by scripts/test); this file checks what those contracts do not.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "console",
    "approvals",
    "executions",
    "accounts",
    "audit",
    "infrastructure",
    "dockergate",
)
MAX_LINES = 600
MAP = ROOT / "docs" / "architecture.md"


def import_cycles(*packages: str) -> list[list[str]]:
    """The module-level import circles of ``packages`` (strongly connected components).

    Every import counts, those inside functions and under ``TYPE_CHECKING`` too:
    an import moved into a function to dodge a circle is still a circle.
    """
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges = {
        module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, without recursion
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(edges[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_module_imports_itself_back_through_others():
    assert import_cycles(*PACKAGES) == []


def test_the_circle_finder_sees_a_circle_hidden_in_a_function(tmp_path, monkeypatch):
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("def later():\n    from circled import c\n")
    (package / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import circled.a\n")
    (package / "d.py").write_text("from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("circled") == [["circled.a", "circled.b", "circled.c"]]


def python_files(include_tests: bool = True) -> list[Path]:
    roots = [ROOT / name for name in (*PACKAGES, "scripts", "docker")]
    if include_tests:
        roots.append(ROOT / "tests")
    return sorted(
        path
        for root in roots
        for path in root.rglob("*.py")
        if "migrations" not in path.parts and "__pycache__" not in path.parts
    )


def test_no_module_is_longer_than_a_reader_keeps_in_mind():
    long = {
        str(path.relative_to(ROOT)): length
        for path in python_files()
        if (length := len(code_lines(path))) > MAX_LINES
    }
    assert long == {}, f"split these by what their parts do (over {MAX_LINES} lines)"


def code_lines(path: Path) -> list[str]:
    """A module's lines but the settings reference's ``#:`` rows (documentation the site is
    made of, kept where each variable is read: see ``console/settings.py``)."""
    return [line for line in path.read_text().splitlines() if not line.startswith("#:")]


def test_every_package_says_what_it_owns():
    silent = [
        str(init.relative_to(ROOT))
        for name in PACKAGES
        for init in (ROOT / name).rglob("__init__.py")
        if "migrations" not in init.parts
        and init.parent.name not in ("management", "commands", "templatetags")
        and not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert silent == []


def enqueued_names() -> set[str]:
    """What each call of ``infrastructure.enqueue.enqueue`` passes as the task's name.

    A constant is read off its module (wherever it was defined); any other
    expression is returned as its source text.
    """
    names = set()
    for path in python_files(include_tests=False):
        tree = ast.parse(path.read_text())
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "infrastructure.enqueue"
            for alias in node.names
            if alias.name == "enqueue"
        }
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in aliases
        ]
        if not calls:
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for call in calls:
            first = call.args[0]
            if isinstance(first, ast.Constant):
                names.add(first.value)
            elif isinstance(first, ast.Name):
                names.add(getattr(module, first.id))
            else:
                names.add(ast.unparse(first))
    return names


def test_every_task_enqueued_by_name_is_registered(db):
    from celery import current_app

    from approvals.notify.deliveries import RETRY_TASKS

    registered = set(current_app.tasks)
    found = enqueued_names()
    # One call site takes the name from the delivery logs' table: every name in it counts.
    assert "RETRY_TASKS[log_model]" in found
    found = (found - {"RETRY_TASKS[log_model]"}) | set(RETRY_TASKS.values())
    assert len(found) >= 7 and found <= registered, found - registered


def test_a_task_registered_in_a_fresh_web_process_without_a_worker():
    """The web process enqueues by name: every task is registered once Django is set up."""
    code = textwrap.dedent(
        """
        import django, os
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
        django.setup()
        from celery import current_app
        print(sorted(name for name in current_app.tasks if not name.startswith("celery.")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert {
        "approvals.tasks.drain_notifications",
        "approvals.tasks.deliver",
        "approvals.tasks.deliver_webhook",
        "approvals.tasks.expire_pending",
        "approvals.tasks.slack_reply",
        "executions.tasks.run_execution",
        "executions.tasks.open_session",
        "executions.tasks.close_session",
    } <= names


ROOTS = "|".join(PACKAGES)
DOTTED = re.compile(rf"`((?:{ROOTS})(?:\.\w+)+)`")
PATH = re.compile(rf"`((?:{ROOTS})/[\w/.-]*)`")


def resolves(dotted: str) -> bool:
    """A module, or an attribute of one (a class, a function, a constant)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_the_map_names_only_modules_and_files_that_exist(db):
    text = MAP.read_text()
    dotted = sorted(set(DOTTED.findall(text)))
    paths = sorted(set(PATH.findall(text)))
    assert len(dotted) > 40 and len(paths) > 10  # the map names the code it describes
    assert [name for name in dotted if not resolves(name)] == []
    assert [path for path in paths if not (ROOT / path.rstrip("/")).exists()] == []


def test_the_map_covers_every_package():
    text = MAP.read_text()
    packages = sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for name in PACKAGES
        for init in (ROOT / name).rglob("__init__.py")
        if not {"migrations", "management", "commands", "templatetags"} & set(init.parts)
    )
    missing = [
        package
        for package in packages
        if f"`{package}`" not in text and f"`{package.replace('.', '/')}/`" not in text
    ]
    assert missing == []


@pytest.mark.parametrize("dotted", ["approvals.nowhere", "approvals.core.services.no_such"])
def test_a_name_that_is_not_there_does_not_resolve(dotted):
    assert not resolves(dotted)
