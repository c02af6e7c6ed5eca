"""What the commands print: lines for the person on standard error, JSON for scripts."""

from __future__ import annotations

import json

import click


def say(line: str) -> None:
    """A line for the person, on standard error (standard output is the script's), unwrapped:
    an address in it must stay one piece to copy."""
    click.echo(line, err=True)


def emit(data) -> None:
    print(json.dumps(data, indent=2))
