"""The documentation site: every variable Airlock reads is on the settings page, and every
shell example shows what it prints when run against a live deployment."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from tests import examples
from tests.serving import ROOT, start_server, user_token

SERVER_PACKAGES = ("console", "approvals", "executions", "accounts", "audit", "infrastructure")
ENV_READERS = {"env", "env_int", "env_bool", "env_choice", "env_list"}
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}  # how Django finds the settings, not one of them


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variables_read(path: Path) -> set[str]:
    """Names read from the environment with a constant: env*("X"), os.environ[...] and .get, os.getenv."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        subscript = isinstance(node, ast.Subscript) and _is_environ(node.value)
        if subscript and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first, function = node.args[0], node.func
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and _reads(function):
            found.add(first.value)
    return found


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _reads(function: ast.AST) -> bool:
    if isinstance(function, ast.Name):
        return function.id in ENV_READERS
    if isinstance(function, ast.Attribute):
        return function.attr == "getenv" or (
            function.attr in ("get", "setdefault") and _is_environ(function.value)
        )
    return False


def test_every_variable_airlock_reads_is_documented_on_the_settings_page():
    read = set()
    for package in SERVER_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            read |= variables_read(path)
    read -= NOT_SETTINGS
    assert {"SECRET_KEY", "PORT", "ASGI_THREADS", "DOCKER_HOST"} <= read  # the scan sees them
    module = hooks()
    documented = {name for names, _, _ in module.documented() for name in names}
    assert sorted(read - documented) == []
    page = module.settings_page()
    for name in read:
        assert f"`{name}`" in page, name
    for names, default, meaning in module.documented():
        assert default and meaning, names


def test_a_row_that_is_not_names_default_meaning_is_refused(tmp_path):
    source = tmp_path / "settings.py"
    source.write_text("#: `A` | `1`\nA = 1\n")
    with pytest.raises(ValueError, match="names \\| default \\| meaning"):
        hooks().documented(source)


PAGES = sorted(
    path.relative_to(ROOT / "docs")
    for path in (ROOT / "docs").rglob("*.md")
    if examples.examples(path)
)


def test_the_pages_with_examples_are_the_ones_expected():
    assert {str(page) for page in PAGES} >= {
        "getting-started.md",
        "guides/admins.md",
        "guides/agents.md",
        "guides/reviewers.md",
    }


@pytest.mark.any_database
@pytest.mark.parametrize("page", PAGES, ids=[str(page) for page in PAGES])
def test_every_shell_example_shows_what_it_prints(page, tmp_path):
    data, home = tmp_path / "data", tmp_path / "home"
    home.mkdir()
    server = start_server(data)
    try:
        env = examples.environment(
            server.base, server.token, user_token(data, "reviewer"), data, home
        )
        for example in examples.examples(ROOT / "docs" / page):
            code, output = examples.run(example, env)
            where = f"docs/{page}:{example.line}: $ {example.command.splitlines()[0]}"
            assert code == 0, f"{where} exited {code}:\n{output}"
            assert examples.normalised(output) == examples.normalised(example.shown), (
                f"{where} printed something else than the page shows "
                f"(`.venv/bin/python -m tests.examples docs/{page} --write` shows it anew)"
            )
    finally:
        server.stop()
