"""``@airlock/sdk`` (``sdk-ts/``), packed and installed as agent builders install it, its
node tests run against a running ``serve``.

The package is built from a copy (``npm ci`` from the committed lock, ``npm run build``),
packed (``npm pack``: what would be published), and installed into an empty project
(``npm init -y``, ``npm install ./airlock-sdk-*.tgz``); its tests (``sdk-ts/test``) run
from there with ``node --test``, so they import ``@airlock/sdk`` as a user does. Nothing
is written into the repository (no ``node_modules``, no ``dist``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.serving import ROOT, agent_token, manage, start_server, user_token
from tests.support import have, require

SDK = ROOT / "sdk-ts"
GUIDE = ROOT / "docs" / "guides" / "typescript.md"
NODE_MAJOR = 18  # package.json's engines
QUIET = {"npm_config_audit": "false", "npm_config_fund": "false",
         "npm_config_update_notifier": "false"}  # fmt: skip


def node_major() -> int:
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
    return int(version.lstrip("v").split(".")[0] or 0)


@pytest.fixture(scope="module")
def tools():
    require(have("node") and have("npm"), "the TypeScript SDK's tests need node and npm")
    require(node_major() >= NODE_MAJOR, f"the TypeScript SDK needs node {NODE_MAJOR} or later")


def npm(*args: str, cwd, timeout: float = 300) -> str:
    """Run npm in ``cwd``; its stdout. Fails the test with npm's output if npm fails."""
    done = subprocess.run(
        ["npm", *args], cwd=cwd, env={**os.environ, **QUIET},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def package(tools, tmp_path_factory):
    """The tarball ``npm pack`` makes of a clean copy of sdk-ts, and what it holds."""
    copy = tmp_path_factory.mktemp("sdk-ts") / "sdk-ts"
    shutil.copytree(SDK, copy, ignore=shutil.ignore_patterns("node_modules", "dist", "*.tgz"))
    npm("ci", cwd=copy)
    npm("run", "lint", cwd=copy)  # prettier, as ruff format is for the Python
    npm("run", "build", cwd=copy)
    (packed,) = json.loads(npm("pack", "--json", cwd=copy))
    return copy, copy / packed["filename"], sorted(f["path"] for f in packed["files"])


@pytest.fixture(scope="module")
def project(package, tmp_path_factory):
    """An empty project that installed the tarball, with sdk-ts's tests copied in."""
    _, tarball, _ = package
    home = tmp_path_factory.mktemp("agent")
    npm("init", "-y", cwd=home)
    npm("install", str(tarball), cwd=home)
    shutil.copytree(SDK / "test", home / "test")
    return home


@pytest.fixture(scope="module")
def deployment(tools, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("sdk-ts-server") / "data"
    server = start_server(data_dir)
    server.reviewer = user_token(data_dir, "reviewer")
    server.agent_token = agent_token(data_dir, "ts-bot", "script.execute", "tool.call:billing.*")
    # The server's own refusals: an agent that may keep one proposal waiting, and one paused.
    server.limited = agent_token(data_dir, "ts-limited", "tool.call:billing.*")
    server.paused = agent_token(data_dir, "ts-paused", "tool.call:billing.*")
    policy = yaml.safe_load(manage(data_dir, "policy", "export"))
    policy["agent_overrides"]["ts-limited"] = {"max_pending": 1}
    (data_dir / "policy.yaml").write_text(yaml.safe_dump(policy))
    manage(data_dir, "policy", "apply", str(data_dir / "policy.yaml"), "--comment", "limits")
    manage(data_dir, "agents", "pause", "ts-paused", "--reason", "incident 7: it loops")
    yield server
    server.stop()


def test_the_tarball_holds_the_built_package_and_no_more(package):
    _, tarball, files = package
    assert tarball.name == "airlock-sdk-0.1.0.tgz"
    assert files == sorted(
        ["package.json", "README.md"]
        + [f"dist/{name}.{kind}" for name in ("client", "errors", "index", "transport", "types")
           for kind in ("js", "d.ts")]
    )  # fmt: skip


def guide_examples() -> list[str]:
    """The ```ts blocks of the TypeScript page of the agent builders' guide."""
    return re.findall(r"^```ts\n(.*?)^```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL)


def test_its_declarations_type_check_the_guides_examples(package, project):
    copy, _, _ = package
    examples = guide_examples()
    assert len(examples) >= 3
    for n, example in enumerate(examples):
        (project / f"guide_{n}.mts").write_text(example)
    files = [f"guide_{n}.mts" for n in range(len(examples))] + ["test/consumer.mts"]
    done = subprocess.run(
        [str(copy / "node_modules" / ".bin" / "tsc"), "--noEmit", "--strict",
         "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
         "--typeRoots", str(copy / "node_modules" / "@types"), "--types", "node", *files],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_node_tests_pass_against_a_live_server(project, deployment):
    tests = sorted(str(path.relative_to(project)) for path in (project / "test").glob("*.test.mjs"))
    assert len(tests) >= 4
    env = {
        **os.environ,
        "AIRLOCK_URL": deployment.base,
        "AIRLOCK_AGENT_TOKEN": deployment.agent_token,
        "AIRLOCK_REVIEWER_TOKEN": deployment.reviewer,
        "AIRLOCK_LIMITED_TOKEN": deployment.limited,
        "AIRLOCK_PAUSED_TOKEN": deployment.paused,
    }
    done = subprocess.run(
        ["node", "--test", *tests], cwd=project, env=env,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    passed = re.search(r"^[#ℹ] pass (\d+)$", output, re.MULTILINE)  # tap or spec reporter
    assert passed and int(passed.group(1)) >= len(tests), output
