"""The documentation's shell examples, run against a live ``serve`` and compared with what they show.

An example is a ```` ```console ```` block of a page under ``docs/``: lines
that start with ``$ `` are commands (one goes on over the next lines while a quote
is open or a line ends with ``\\`` or ``|``; ``<<'EOF'`` takes the lines up
to ``EOF``), the lines after a command
are its output. A page's blocks run in order, in one shell session per
command with the same environment, against a fresh deployment:

- ``$AIRLOCK``: the console's address (shown in output as ``http://127.0.0.1:8000``; ``$HOME`` as ``~``);
- ``$TOKEN``: the demo agent's token; ``$REVIEWER_TOKEN``: the reviewer's personal token;
- ``airlock`` and ``python`` on the ``PATH`` from ``.venv``, a fresh ``HOME``,
  the deployment's ``AIRLOCK_DATA_DIR``, the checkout as working directory.

Output is compared after normalising what changes from run to run: times,
durations and ages, tokens, hashes and the address. A block fenced as
```` ```text ```` is an illustration and is not run.

    .venv/bin/python -m tests.examples docs/getting-started.md   # print what each command shows
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN_ADDRESS = "http://127.0.0.1:8000"
FENCE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
NORMALISE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\balk_[A-Za-z0-9_-]{20,}"), "<token>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<hash>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s|min)\b"), "<duration>"),
    # a table's columns are as wide as what they hold this time
    (re.compile(r"([━─═])\1+"), r"\1"),
    (re.compile(r" {2,}"), " "),
]


@dataclass
class Example:
    page: Path
    line: int  # of the command, in the page
    command: str
    shown: str  # the output the page shows


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for block in FENCE.finditer(text):
        first_line = text[: block.start(1)].count("\n") + 1
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise ValueError(f"{page}:{first_line + i}: output before any command")
            start, command = i, lines[i][2:]
            heredoc = re.search(r"<<'?(\w+)'?", command)
            while not heredoc and _goes_on(command):
                i += 1
                command += "\n" + lines[i]
            if heredoc:
                while lines[i] != heredoc.group(1):
                    i += 1
                    command += "\n" + lines[i]
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            found.append(Example(page, first_line + start, command, "\n".join(output)))
    return found


def _goes_on(command: str) -> bool:
    """Whether a command continues on the next line: a ``\\``, a ``|``, an open quote."""
    if command.endswith(("\\", "|")):
        return True
    try:
        shlex.split(command)
    except ValueError:
        return True
    return False


def environment(base: str, token: str, reviewer: str, data: Path, home: Path) -> dict[str, str]:
    venv = ROOT / ".venv" / "bin"
    return {
        "PATH": f"{venv}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "AIRLOCK": base,
        "TOKEN": token,
        "REVIEWER_TOKEN": reviewer,
        "AIRLOCK_DATA_DIR": str(data),
        "COLUMNS": "100",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }


def run(example: Example, env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", "-c", example.command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = (done.stdout + done.stderr).replace(env["AIRLOCK"], SHOWN_ADDRESS)
    output = output.replace(env["HOME"], "~")
    return done.returncode, output


def normalised(text: str) -> str:
    for pattern, placeholder in NORMALISE:
        text = pattern.sub(placeholder, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def main() -> None:
    """Run a page's examples against a fresh deployment; print what each shows (``--write``:
    and put that in the page, in place of what it showed)."""
    import tempfile

    from tests.serving import start_server, user_token

    page = Path(sys.argv[1]).resolve()
    shown: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="airlock-examples-") as scratch:
        data, home = Path(scratch) / "data", Path(scratch) / "home"
        home.mkdir()
        server = start_server(data)
        try:
            env = environment(server.base, server.token, user_token(data, "reviewer"), data, home)
            for example in examples(page):
                code, output = run(example, env)
                print(f"--- {example.page.name}:{example.line} (exit {code})\n$ {example.command}")
                print(output.rstrip("\n"))
                shown[example.line] = "\n".join(
                    line.rstrip() for line in output.rstrip("\n").splitlines()
                )
        finally:
            server.stop()
    if "--write" in sys.argv:
        page.write_text(rewritten(page, shown))


def rewritten(page: Path, shown: dict[int, str]) -> str:
    """The page with each example's output replaced by ``shown[its line]``."""
    lines = page.read_text().splitlines()
    by_line = {example.line: example for example in examples(page)}
    out, i = [], 0
    while i < len(lines):
        example = by_line.get(i + 1)
        if example is None:
            out.append(lines[i])
            i += 1
            continue
        command_lines = example.command.count("\n") + 1
        out.extend(lines[i : i + command_lines])
        i += command_lines
        while i < len(lines) and not lines[i].startswith(("$ ", "```")):
            i += 1  # the old output
        if shown[example.line]:
            out.extend(shown[example.line].splitlines())
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    main()
